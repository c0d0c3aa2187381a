// bpftrace is supervised: a killed bpftrace is restarted and counted, the
// agent's counters keep counting, and a killed agent leaves no bpftrace behind.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { describe, it } from "node:test";
import { startAgentProcess, waitFor } from "./support/agentProcess.ts";
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

describe("supervision", { skip: skipWithoutKernel(), timeout: 180_000 }, () => {
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
});
