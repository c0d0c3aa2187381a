// scripts/runTests.ts, the runner behind `npm run test:unit` and `test:e2e`:
// a file that passes or fails is reported as such, and a file that never
// exits is killed after its time limit with everything it started, named,
// and fails the run.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { expandPatterns, parseArgs, runFiles, summary, type FileResult } from "../../../../scripts/runTests.ts";
import { repoPath } from "../../repoPath.ts";

const root = repoPath();
const fixture = (name: string): string => path.relative(root, path.join(root, "agent/test/fixtures/runTests", `${name}.fixture.ts`));
const runner = path.join(root, "scripts/runTests.ts");

/** Running, as opposed to gone or dead and not yet reaped. */
function running(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/s.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

async function run(files: string[], timeoutS: number, graceS = 1): Promise<{ results: FileResult[]; log: string[]; output: string }> {
  const log: string[] = [];
  let output = "";
  const cwd = process.cwd();
  process.chdir(root);
  try {
    const results = await runFiles({ files, timeoutS, graceS, testArgs: ["--test-reporter=spec"], log: (l) => log.push(l), output: (c) => (output += c) });
    return { results, log, output };
  } finally {
    process.chdir(cwd);
  }
}

void describe("runTests", () => {
  void it("reports a passing and a failing file by their exit", async () => {
    const { results, log, output } = await run([fixture("passes"), fixture("fails")], 120);
    assert.deepEqual(results.map((r) => [r.file, r.outcome]), [[fixture("passes"), "passed"], [fixture("fails"), "failed"]]);
    assert.deepEqual(log, []);
    assert.match(output, /✔ passes/);
    assert.match(output, /✖ fails/);
  });

  void it("kills a file that never exits after its limit, with its process group, and names it", async () => {
    const started = performance.now();
    const { results, log, output } = await run([fixture("hangsAtExit"), fixture("passes")], 2, 1);
    const seconds = (performance.now() - started) / 1000;
    const [hung, next] = results;
    assert.ok(hung && next);
    assert.equal(hung.outcome, "timeout");
    assert.equal(next.outcome, "passed", "the next file still runs");
    assert.deepEqual(log, [`TIMEOUT: ${fixture("hangsAtExit")} after 2 s`]);
    assert.match(output, /✔ passes, then leaves an interval and a child behind/);
    // The left-behind child ignores SIGTERM: only the group's SIGKILL after the grace ends it.
    const pid = Number(/grandchild pid (\d+)/.exec(output)?.[1]);
    assert.ok(pid > 0, output);
    assert.equal(running(pid), false, `grandchild ${pid} still running`);
    assert.ok(hung.seconds >= 2 && hung.seconds < 10, `${hung.seconds} s`);
    assert.ok(seconds < 60);
  });

  void it("as a command: streams the output, prints TIMEOUT and a summary, exits 1", async () => {
    const child = spawn(process.execPath, [runner, "--timeout=2", "--grace=1", "--test-reporter=spec", fixture("hangsAtExit"), fixture("passes")], {
      cwd: root,
      env: { ...process.env, LOSTWRITE_TEST_TIMEOUT: "" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (c: string) => (stdout += c));
    child.stderr.setEncoding("utf8").on("data", (c: string) => (stderr += c));
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    assert.equal(code, 1, stdout + stderr);
    assert.match(stderr, new RegExp(`^TIMEOUT: ${fixture("hangsAtExit").replaceAll(".", "\\.")} after 2 s$`, "m"));
    assert.match(stdout, /✔ passes\b/);
    assert.match(stdout, /runTests: 2 files, 1 passed, 0 failed, 1 timed out/);
  });

  void it("parses its options; LOSTWRITE_TEST_TIMEOUT overrides --timeout", () => {
    assert.deepEqual(parseArgs(["--timeout=30", "--test-concurrency=1", "a.test.ts"], {}), {
      patterns: ["a.test.ts"], timeoutS: 30, graceS: 5, testArgs: ["--test-concurrency=1"],
    });
    assert.equal(parseArgs(["a.test.ts"], {}).timeoutS, 600);
    assert.equal(parseArgs(["--timeout=30", "a.test.ts"], { LOSTWRITE_TEST_TIMEOUT: "1800" }).timeoutS, 1800);
    assert.throws(() => parseArgs(["--timeout=soon", "a.test.ts"], {}), /--timeout must be a positive number/);
    assert.throws(() => parseArgs(["--bail", "a.test.ts"], {}), /unknown option --bail/);
    assert.throws(() => parseArgs([], {}), /no test files/);
  });

  void it("expands globs to sorted files, once each; a glob that matches nothing is an error", () => {
    const cwd = process.cwd();
    process.chdir(root);
    try {
      const files = expandPatterns(["agent/test/fixtures/runTests/*.fixture.ts", fixture("passes")]);
      assert.deepEqual(files, [fixture("fails"), fixture("hangsAtExit"), fixture("passes")]);
      assert.throws(() => expandPatterns(["agent/test/fixtures/runTests/*.nothing.ts"]), /no test file matches/);
    } finally {
      process.chdir(cwd);
    }
  });

  void it("summarises failures and timeouts by file", () => {
    const lines = summary([
      { file: "a.test.ts", outcome: "passed", code: 0, signal: null, seconds: 1 },
      { file: "b.test.ts", outcome: "failed", code: 1, signal: null, seconds: 2 },
      { file: "c.test.ts", outcome: "timeout", code: null, signal: "SIGTERM", seconds: 600.2 },
    ], 603.4);
    assert.deepEqual(lines, [
      "runTests: 3 files, 1 passed, 1 failed, 1 timed out, in 603 s",
      "  FAILED  b.test.ts (exit 1)",
      "  TIMEOUT c.test.ts (killed after 600 s)",
    ]);
  });
});
