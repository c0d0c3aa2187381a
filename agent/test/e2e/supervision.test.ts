// bpftrace is supervised: a killed bpftrace is restarted and counted, so is
// one that hangs (no tick, no answer when asked), the agent's counters keep
// counting, and a killed agent leaves no bpftrace behind.
// A bpftrace killed after a healthy run comes back at once, every time; only
// one that dies before attaching (a crash loop) is retried with growing waits.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, it, type TestContext } from "node:test";
import { startAgentProcess, sumMetric, waitFor, type AgentProcess, type LogLine } from "./support/agentProcess.ts";
import { assertKernelRequirements, skipWithoutKernel } from "./support/kernelRequirements.ts";

/** bpftrace processes whose parent chain leads to `ancestor`. */
function bpftraceUnder(ancestor: number): number[] {
  const out = execFileSync("ps", ["-eo", "pid=,ppid=,comm="], { encoding: "utf8" });
  const rows = out.trim().split("\n").map((l) => l.trim().split(/\s+/)).map(([pid, ppid, comm]) => ({ pid: Number(pid), ppid: Number(ppid), comm }));
  const parent = new Map(rows.map((r) => [r.pid, r.ppid]));
  const descends = (pid: number): boolean => {
    for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) if (p === ancestor) return true;
    return false;
  };
  return rows.filter((r) => r.comm === "bpftrace" && descends(r.pid)).map((r) => r.pid);
}

/** bpftrace processes running our rendered program for this agent (setpriv re-parents nothing, but be exact). */
function bpftraceOf(agentPid: number): number[] {
  const out = execFileSync("ps", ["-eo", "pid=,args="], { encoding: "utf8" });
  return out
    .trim()
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => / bpftrace -f json .*lostwrite-probe-.*program\.bt /.test(l) && l.split(/\s+/).includes(String(agentPid)))
    .map((l) => Number(l.split(/\s+/)[0]));
}

/** The agent's bpftrace: its direct child (setpriv execs bpftrace) whose comm is bpftrace, zombies left out. */
function bpftraceChildren(agentPid: number): number[] {
  const pids: number[] = [];
  for (const tid of readdirSync(`/proc/${agentPid}/task`)) {
    let children = "";
    try {
      children = readFileSync(`/proc/${agentPid}/task/${tid}/children`, "utf8");
    } catch {
      continue; // the thread ended meanwhile
    }
    for (const pid of children.split(" ").filter(Boolean).map(Number)) {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
        const close = stat.lastIndexOf(")");
        if (stat.slice(stat.indexOf("(") + 1, close) === "bpftrace" && stat[close + 2] !== "Z") pids.push(pid);
      } catch {
        // gone meanwhile
      }
    }
  }
  return pids;
}


const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function readyAndAttached(agent: AgentProcess): Promise<boolean> {
  const ready = await fetch(`${agent.url}/readyz`);
  await ready.body?.cancel();
  return ready.status === 200 && (await agent.metric("lostwrite_probe_up")) === 1;
}

/**
 * SIGKILLs the agent's bpftrace and waits until a new one attached (the
 * exit counted, probe_up 1 again, in the same scrape); returns the ms that took.
 */
async function killAndWaitForReattach(agent: AgentProcess, exitsBefore: number, timeoutMs: number): Promise<number> {
  const agentPid = agent.child.pid!;
  const running = bpftraceChildren(agentPid);
  assert.equal(running.length, 1, `one bpftrace under the agent, not ${running.length}`);
  const killed = running[0]!;
  const killedAt = Date.now();
  process.kill(killed, "SIGKILL");
  await waitFor(
    "a new bpftrace attached",
    async () => {
      const samples = await agent.metrics();
      return sumMetric(samples, "lostwrite_probe_restarts_total", { reason: "exited" }) === exitsBefore + 1 && sumMetric(samples, "lostwrite_probe_up") === 1;
    },
    timeoutMs,
  );
  const reattachMs = Date.now() - killedAt;
  const [next] = bpftraceChildren(agentPid);
  assert.ok(next !== undefined && next !== killed, "a new bpftrace process");
  return reattachMs;
}

/**
 * Log lines from startAgentProcess's `stderr`, which splits each chunk on
 * newlines: a line cut across two chunks is two entries, joined back here.
 */
function rejoinLog(entries: string[]): LogLine[] {
  const lines: LogLine[] = [];
  let partial = "";
  for (const entry of entries) {
    // Every log line starts with its level (sinks/log.ts).
    partial = entry.startsWith('{"level":') ? entry : partial + entry;
    try {
      lines.push(JSON.parse(partial) as LogLine);
      partial = "";
    } catch {
      // the rest comes in the next entry
    }
  }
  return lines;
}

function restartLines(log: LogLine[]): LogLine[] {
  return log.filter((line) => line.msg === "bpftrace exited; restarting");
}

describe("supervision", { skip: skipWithoutKernel(), timeout: 420_000 }, () => {
  it("restarts a killed bpftrace, counts the restart and is ready again", async () => {
    assertKernelRequirements();
    const agent = await startAgentProcess(["--target-pid", String(process.pid), "--apiserver", "127.0.0.1:1"]);
    try {
      const [first] = bpftraceOf(agent.child.pid!);
      assert.ok(first, "bpftrace runs for the agent");
      assert.deepEqual(bpftraceUnder(agent.child.pid!).length, 1);
      process.kill(first, "SIGKILL");
      await waitFor("probe_up to drop", async () => (await agent.metric("lostwrite_probe_up")) === 0, 10_000);
      await waitFor("a new bpftrace attached", async () => (await agent.metric("lostwrite_probe_up")) === 1, 90_000);
      assert.equal(await agent.metric("lostwrite_probe_restarts_total", { reason: "exited" }), 1);
      const [second] = bpftraceOf(agent.child.pid!);
      assert.ok(second && second !== first, "a new bpftrace process");
      const ready = await fetch(`${agent.url}/readyz`);
      assert.equal(ready.status, 200);
      // The harmless RLIMIT_MEMLOCK message is not logged as a problem.
      assert.ok(!agent.stderr.some((l) => l.includes("RLIMIT_MEMLOCK")), "RLIMIT_MEMLOCK is not reported");
    } finally {
      await agent.stop();
    }
  });

  it("restarts a bpftrace that stopped: no tick and no answer to the agent's question, counted as heartbeat_missed", async () => {
    assertKernelRequirements();
    const agent = await startAgentProcess(["--target-pid", String(process.pid), "--apiserver", "127.0.0.1:1"]);
    try {
      const [stopped] = bpftraceChildren(agent.child.pid!);
      assert.ok(stopped, "bpftrace runs for the agent");
      // Stopped, it prints no tick and reads no control message: what a hung bpftrace looks like.
      process.kill(stopped, "SIGSTOP");
      await waitFor(
        "a new bpftrace attached in place of the stopped one",
        async () => (await agent.metric("lostwrite_probe_restarts_total", { reason: "heartbeat_missed" })) === 1 && (await readyAndAttached(agent)),
        90_000,
      );
      await waitFor("the stopped bpftrace killed, one new bpftrace in its place", () => {
        const running = bpftraceChildren(agent.child.pid!);
        return running.length === 1 && running[0] !== stopped;
      }, 10_000);
      assert.equal(await agent.metric("lostwrite_probe_restarts_total", { reason: "exited" }), 0, "the kill for silence is not counted again as an exit");
      assert.ok(
        agent.stderr.some((line) => line.includes("stopped beating and does not answer")),
        "the agent says why it restarted the probe",
      );
    } finally {
      await agent.stop();
    }
  });

  it("leaves no bpftrace behind when the agent is SIGKILLed", async () => {
    assertKernelRequirements();
    const agent = await startAgentProcess(["--target-pid", String(process.pid), "--apiserver", "127.0.0.1:1"]);
    const pid = agent.child.pid!;
    const children = bpftraceOf(pid);
    assert.equal(children.length, 1);
    agent.child.kill("SIGKILL");
    await agent.stop();
    await waitFor("bpftrace to die with the agent", () => {
      try {
        process.kill(children[0]!, 0);
        // A zombie still answers kill(0) until reaped: check its state.
        const state = execFileSync("ps", ["-o", "stat=", "-p", String(children[0])], { encoding: "utf8" }).trim();
        return state.startsWith("Z") || state === "";
      } catch {
        return true;
      }
    }, 5000);
  });

  it("restarts a bpftrace killed after a healthy run at once, kill after kill", { timeout: 240_000 }, async (t: TestContext) => {
    assertKernelRequirements();
    const kills = 5;
    const agent = await startAgentProcess(["--target-pid", String(process.pid), "--apiserver", "127.0.0.1:1"]);
    const log = agent.log;
    const reattachMs: number[] = [];
    try {
      for (let kill = 0; kill < kills; kill++) {
        await waitFor("the agent ready with its probe attached", () => readyAndAttached(agent), 60_000);
        // A healthy run is one attached >= 500 ms: 1–3 s is well past it.
        await sleep(1000 + Math.random() * 2000);
        // Compiling the program takes seconds; 30 s only fails a supervisor that backs off.
        reattachMs.push(await killAndWaitForReattach(agent, kill, 30_000));
      }
      const report = `re-attach after SIGKILL: ${reattachMs.map((ms) => `${(ms / 1000).toFixed(1)} s`).join(", ")}`;
      console.log(report);
      t.diagnostic(report);

      assert.equal(await agent.metric("lostwrite_probe_restarts_total", { reason: "exited" }), kills);
      assert.equal(await agent.metric("lostwrite_probe_restarts_total", { reason: "spawn_failed" }), 0);
      const restarts = restartLines(log);
      assert.equal(restarts.length, kills, `one restart line per kill: ${JSON.stringify(restarts)}`);
      for (const line of restarts) {
        assert.equal(line.signal, "SIGKILL", JSON.stringify(line));
        assert.equal(line.afterHealthyRun, true, `a kill after a healthy run: ${JSON.stringify(line)}`);
        assert.ok(typeof line.inMs === "number" && line.inMs < 1000, `restarted at once, not backed off: ${JSON.stringify(line)}`);
      }
      assert.ok(await readyAndAttached(agent), "ready after the last kill");
    } finally {
      await agent.stop();
    }
  });

  it("backs off a bpftrace that dies before attaching, longer each time, and not once it runs healthy", { timeout: 180_000 }, async () => {
    assertKernelRequirements();
    const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-crashloop-"));
    const realBpftrace = execFileSync("sh", ["-c", "command -v bpftrace"], { encoding: "utf8" }).trim();
    // Exits 1 at once on its first three starts (the version query the agent
    // makes at start-up is answered by the real bpftrace), then is bpftrace.
    // Each start writes its time in ms to `starts`.
    const crashes = 3;
    const fake = path.join(dir, "bpftrace");
    writeFileSync(
      fake,
      [
        "#!/bin/sh",
        `[ "$1" = --version ] && exec ${realBpftrace} "$@"`,
        `echo "$(($(date +%s%N) / 1000000))" >> ${dir}/starts`,
        `[ "$(wc -l < ${dir}/starts)" -le ${crashes} ] && { echo "crashing on purpose" >&2; exit 1; }`,
        `exec ${realBpftrace} "$@"`,
        "",
      ].join("\n"),
    );
    chmodSync(fake, 0o755);
    let agent: AgentProcess | undefined;
    try {
      // Start-up waits for the first attach, i.e. through the crash loop.
      agent = await startAgentProcess(["--target-pid", String(process.pid), "--apiserver", "127.0.0.1:1", "--bpftrace", fake]);
      // What it logs from now on: the crash loop's restart lines came before.
      const logFrom = agent.log.length;
      const starts = readFileSync(path.join(dir, "starts"), "utf8").trim().split("\n").map(Number);
      assert.equal(starts.length, crashes + 1, "three crashes, then the start that attached");
      assert.equal(await agent.metric("lostwrite_probe_restarts_total", { reason: "exited" }), crashes);
      const crashLines = restartLines(rejoinLog(agent.stderr));
      assert.equal(crashLines.length, crashes, JSON.stringify(crashLines));
      // Half to all of 1 s, 2 s, 4 s: each wait longer than the one before,
      // and the next start no sooner than its wait.
      const waits = crashLines.map((line) => line.inMs as number);
      const expected = [[500, 1000], [1000, 2000], [2000, 4000]] as const;
      crashLines.forEach((line, n) => {
        assert.equal(line.afterHealthyRun, false, JSON.stringify(line));
        assert.equal(line.code, 1, JSON.stringify(line));
        const [least, most] = expected[n]!;
        assert.ok(waits[n]! >= least && waits[n]! <= most, `crash ${n + 1} waits ${waits[n]} ms, not ${least}–${most}`);
        if (n > 0) assert.ok(waits[n]! > waits[n - 1]!, `waits grow: ${waits.join(", ")}`);
        const gap = starts[n + 1]! - starts[n]!;
        assert.ok(gap >= waits[n]! - 20, `start ${n + 2} came ${gap} ms after start ${n + 1}, before its ${waits[n]} ms wait`);
      });

      // Once it ran healthy, a kill is restarted at once: the crash loop's backoff is forgotten.
      await sleep(1500);
      await killAndWaitForReattach(agent, crashes, 30_000);
      const [afterKill] = restartLines(agent.log.slice(logFrom));
      assert.ok(afterKill, "a restart line for the kill");
      assert.equal(afterKill.afterHealthyRun, true, JSON.stringify(afterKill));
      assert.ok((afterKill.inMs as number) < 1000, `the backoff was reset: ${JSON.stringify(afterKill)}`);
    } finally {
      await agent?.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
