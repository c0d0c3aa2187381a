// `npm run demo` on a machine that lacks what it needs. Here tracefs is what
// can be taken away (in a private mount namespace: the host keeps its mount);
// bpftrace cannot be uninstalled by a test, so its install is the same code
// path with another command (agent/test/unit/demo/install.test.ts plans it).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { describe, it } from "node:test";
import { repoPath } from "../repoPath.ts";
import { assertKernelRequirements, skipWithoutKernel } from "./support/kernelRequirements.ts";

const NODE = repoPath("node_modules/.bin/node");
const CLI = repoPath("agent/src/cli.ts");

interface Run {
  code: number | null;
  stdout: string;
  /** Whether tracefs was mounted in the demo's mount namespace after it stopped. */
  tracefsAfter: boolean;
}

/**
 * The demo in a mount namespace of its own whose tracefs is unmounted, as
 * `user` (root or nobody). Stopped with SIGINT once `until` appears.
 */
function demoWithoutTracefs(args: string[], opts: { user: "root" | "nobody"; until?: RegExp; timeoutMs: number }): Promise<Run> {
  const asUser = opts.user === "nobody" ? "setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp " : "";
  const script = `umount /sys/kernel/tracing || exit 99
${asUser}"$@" & pid=$!
trap 'kill -INT $pid' INT TERM
wait $pid; code=$?; wait $pid 2>/dev/null
if [ -d /sys/kernel/tracing/events ]; then echo TRACEFS-AFTER=yes; else echo TRACEFS-AFTER=no; fi
exit $code`;
  const child = spawn("unshare", ["--mount", "--propagation", "private", "sh", "-c", script, "sh", NODE, CLI, "demo", ...args], {
    cwd: repoPath(),
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, NO_COLOR: "1" },
  });
  let stdout = "";
  let stopped = false;
  const stop = (): void => {
    if (!stopped) child.kill("SIGINT");
    stopped = true;
  };
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
    if (opts.until?.test(stdout)) stop();
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  const timer = setTimeout(stop, opts.timeoutMs);
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, tracefsAfter: /TRACEFS-AFTER=yes/.test(stdout) });
    });
  });
}

describe("lostwrite demo on a machine that lacks what it needs", { skip: skipWithoutKernel(), timeout: 180_000 }, () => {
  it("as root it mounts tracefs, saying the command, and runs", async () => {
    assertKernelRequirements();
    const run = await demoWithoutTracefs(["--listen", "127.0.0.1:0"], { user: "root", until: /ready in \d/, timeoutMs: 120_000 });
    const explain = `\n--- output\n${run.stdout}`;
    assert.match(run.stdout, /installing it \(--no-install to refuse\)/, explain);
    assert.match(run.stdout, /tracefs is not mounted: running mount -t tracefs nodev \/sys\/kernel\/tracing/, explain);
    assert.match(run.stdout, /ready in \d/, `the demo started after the mount${explain}`);
    assert.equal(run.tracefsAfter, true, explain);
  });

  it("with --no-install it mounts nothing and prints the command to run", async () => {
    assertKernelRequirements();
    const run = await demoWithoutTracefs(["--no-install", "--listen", "127.0.0.1:0"], { user: "root", timeoutMs: 60_000 });
    const explain = `\n--- output\n${run.stdout}`;
    assert.equal(run.code, 1, explain);
    assert.match(run.stdout, /--no-install: nothing installed\. Run:\n {2}mount -t tracefs nodev \/sys\/kernel\/tracing\n/, explain);
    assert.doesNotMatch(run.stdout, /running mount/, explain);
    assert.equal(run.tracefsAfter, false, "tracefs stays unmounted");
  });

  it("not root: it says exactly what to run as root, and installs nothing", async () => {
    assertKernelRequirements();
    const run = await demoWithoutTracefs(["--listen", "127.0.0.1:0"], { user: "nobody", timeoutMs: 60_000 });
    const explain = `\n--- output\n${run.stdout}`;
    assert.equal(run.code, 1, explain);
    assert.match(run.stdout, /not root: nothing installed\. Run, as root:\n {2}sudo mount -t tracefs nodev \/sys\/kernel\/tracing\n/, explain);
    assert.match(run.stdout, /sudo node_modules\/\.bin\/node agent\/src\/cli\.ts demo/, explain);
    assert.equal(run.tracefsAfter, false);
  });
});
