// For e2e tests that build a network of their own (veth pairs, dummy
// interfaces, node and pod addresses): the test file runs itself again under
// `unshare --net`, so every address and socket it makes lives in a namespace
// that ends with it and nothing reaches the machine's own network.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";

/** Whether `unshare` and `ip` are there; null when they are, else why not. */
export function whyNoOwnNetworkNamespace(): string | null {
  const missing = [
    ["unshare", "unshare (util-linux) not on PATH"],
    ["ip", "ip (iproute2) not on PATH"],
  ].filter(([name]) => !spawnSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).stdout.trim());
  return missing.length > 0 ? missing.map(([, why]) => why).join("; ") : null;
}

/**
 * Runs the test file `file` under `unshare --net` with `marker`=1 in its
 * environment (the file runs its scenario when it sees it), prints what it
 * printed, and fails unless exactly `tests` tests ran there and passed.
 */
export function runInOwnNetworkNamespace(file: string, marker: string, opts: { timeoutMs: number; tests: number }): void {
  // NODE_TEST_CONTEXT would make the inner `node --test` skip its file as a recursive run.
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const run = spawnSync("unshare", ["--net", "--", process.execPath, "--test", "--test-reporter=spec", `--test-timeout=${opts.timeoutMs - 20_000}`, file], {
    env: { ...env, [marker]: "1" },
    encoding: "utf8",
    timeout: opts.timeoutMs,
  });
  process.stdout.write(run.stdout);
  process.stderr.write(run.stderr);
  assert.equal(run.status, 0, `the scenario in its own network namespace failed (status ${run.status}, signal ${run.signal})`);
  assert.match(run.stdout, new RegExp(`ℹ pass ${opts.tests}\\b`), `${opts.tests} test(s) ran and passed`);
  assert.match(run.stdout, /ℹ fail 0\b/);
}
