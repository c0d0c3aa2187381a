// One dead connection, a client writing into it in a loop: on the real kernel,
// at more than 20 000 failed sends a second for 30 s, the failed-syscall
// counter must equal the client's own count exactly, the lost request must be
// one loss event, and the agent must not grow with the flood. The kernel
// counts the failures (@failed_sends) and prints only the socket's first, so
// nothing of the flood has to cross to user space.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import type net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { faultyApiserver, portOf } from "./support/faultyApiserver.ts";
import { assertKernelRequirements, skipWithoutKernel } from "./support/kernelRequirements.ts";

const CLIENT = path.join(path.dirname(fileURLToPath(import.meta.url)), "clients/lw_client.py");
const FLOOD_SECONDS = 30;
const MIN_RATE = 20_000;
const CLK_TCK = 100;
const IDLE_SAMPLE_MS = 5000;

/** CPU seconds (user + system) and resident bytes of a process, from /proc. */
function usage(pid: number): { cpuS: number; rssBytes: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after the comm, which may hold spaces: state is field 3, utime 14, stime 15.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const cpuS = (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
  return { cpuS, rssBytes: rssKb * 1024 };
}

/** The agent's bpftrace: its child process of that name. */
function bpftracePid(agentPid: number): number {
  const children = readFileSync(`/proc/${agentPid}/task/${agentPid}/children`, "utf8").trim().split(/\s+/).map(Number);
  for (const child of children) {
    // setpriv execs bpftrace in place, so the child's comm becomes bpftrace.
    if (readFileSync(`/proc/${child}/comm`, "utf8").trim() === "bpftrace") return child;
  }
  throw new Error(`no bpftrace among the agent's children ${children.join(",")}`);
}

describe("a flood of failed sends into one dead connection, on the real kernel", { skip: skipWithoutKernel(), timeout: 180_000 }, () => {
  let dir: string;
  let server: net.Server;
  let agent: AgentProcess;
  let client: string;

  before(async () => {
    assertKernelRequirements();
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-flood-"));
    const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
    client = path.join(dir, "lw-flood");
    symlinkSync(python, client);
    server = await faultyApiserver();
    agent = await startAgentProcess(["--target-comm", "^lw-flood$", "--apiserver", `127.0.0.1:${portOf(server)}`, "--correlation-window", "500ms"]);
  });

  after(async () => {
    await agent?.stop();
    server?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it(`counts every failed send exactly and reports one loss, with the agent's CPU and memory flat`, async (t) => {
    const child = spawn(client, [CLIENT, "flood", "127.0.0.1", String(portOf(server))], { stdio: ["pipe", "pipe", "inherit"] });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
    await waitFor("the agent to watch the flooding client", () => agent.stderr.some((line) => line.includes(`lw-flood[${child.pid}]`)));

    const agentPid = agent.child.pid!;
    const probePid = bpftracePid(agentPid);
    // What the agent spends with its target idle, to compare the flood with.
    const idleFrom = { agent: usage(agentPid), at: performance.now() };
    await new Promise((r) => setTimeout(r, IDLE_SAMPLE_MS));
    const before = { agent: usage(agentPid), probe: usage(probePid), at: performance.now() };
    const idleCpu = (before.agent.cpuS - idleFrom.agent.cpuS) / ((before.at - idleFrom.at) / 1000);
    child.stdin.end("go\n");
    assert.equal(await exited, 0, `client failed: ${out}`);
    const after = { agent: usage(agentPid), probe: usage(probePid), at: performance.now() };

    const report = JSON.parse(out.trim().split("\n").at(-1)!) as { counts: Record<string, number>; seconds: number };
    const failures = Object.entries(report.counts).filter(([name]) => name !== "sent");
    const failed = failures.reduce((sum, [, n]) => sum + n, 0);
    const rate = failed / report.seconds;
    assert.ok(rate >= MIN_RATE && report.seconds >= FLOOD_SECONDS, `${failed} failed sends in ${report.seconds.toFixed(1)} s: ${rate.toFixed(0)}/s`);
    assert.equal(report.counts.sent ?? 0, 0, "every send after the reset failed");

    // The counter is printed every second: the last print after the client exited carries the rest.
    const counted = (errno?: string): Promise<number> =>
      agent.metric("lostwrite_apiserver_syscall_errors_total", { process: "lw-flood", syscall: "sendto", ...(errno ? { errno } : {}) });
    await waitFor("the counter to reach the client's count", async () => (await counted()) >= failed, 5000);
    await new Promise((r) => setTimeout(r, 1500)); // one more print: the counter must not pass it
    for (const [errno, n] of failures) assert.equal(await counted(errno), n, `sendto ${errno}`);
    assert.equal(await counted(), failed);

    const events = agent.events.filter((e) => e.pid === child.pid);
    assert.deepEqual(events.map((e) => e.cause), ["connection_reset"], `one lost request, one event: ${JSON.stringify(events.slice(0, 3))}`);
    assert.equal(await agent.metric("lostwrite_probe_events_lost_total"), 0, "the kernel dropped no event");
    assert.equal(await agent.metric("lostwrite_events_dropped_total"), 0, "the agent dropped nothing");

    const elapsedS = (after.at - before.at) / 1000;
    const agentCpu = (after.agent.cpuS - before.agent.cpuS) / elapsedS;
    const probeCpu = (after.probe.cpuS - before.probe.cpuS) / elapsedS;
    const rssGrowth = after.agent.rssBytes - before.agent.rssBytes;
    t.diagnostic(
      `${failed} failed sends in ${report.seconds.toFixed(1)} s (${rate.toFixed(0)}/s); ` +
        `agent CPU ${(agentCpu * 100).toFixed(1)} % of a core (idle: ${(idleCpu * 100).toFixed(1)} %), bpftrace ${(probeCpu * 100).toFixed(1)} %; ` +
        `agent RSS ${(before.agent.rssBytes / 2 ** 20).toFixed(1)} → ${(after.agent.rssBytes / 2 ** 20).toFixed(1)} MiB, ` +
        `bpftrace RSS ${(before.probe.rssBytes / 2 ** 20).toFixed(1)} → ${(after.probe.rssBytes / 2 ** 20).toFixed(1)} MiB`,
    );
    // Flat: what an idle agent spends (a counter print a second), not a share of the flood.
    assert.ok(agentCpu < 0.1, `agent used ${(agentCpu * 100).toFixed(1)} % of a core during the flood`);
    assert.ok(probeCpu < 0.05, `bpftrace used ${(probeCpu * 100).toFixed(1)} % of a core during the flood`);
    assert.ok(rssGrowth < 32 * 2 ** 20, `agent RSS grew by ${(rssGrowth / 2 ** 20).toFixed(1)} MiB`);

    // The client has exited: after one more print the kernel forgets its
    // failed-send entries (keyed pid, syscall, errno: deleted one by one), so
    // they take no room in the map, and the counter stays exact.
    assert.ok(failedSendPids(probePid).includes(child.pid!), "the kernel map held the client's failures");
    await waitFor("the kernel to forget the exited client's failed sends", () => !failedSendPids(probePid).includes(child.pid!), 15_000);
    await new Promise((r) => setTimeout(r, 1500)); // another print: nothing is counted twice
    assert.equal(await counted(), failed, "the counter after the kernel forgot the entries");
  });
});

/** The pids with an entry in the probe's @failed_sends map in the kernel (bpftool; keys start with the pid, little-endian u64). */
function failedSendPids(probePid: number): number[] {
  const ids = readdirSync(`/proc/${probePid}/fdinfo`).flatMap((fd) => {
    const id = /^map_id:\s+(\d+)$/m.exec(readFileSync(`/proc/${probePid}/fdinfo/${fd}`, "utf8"))?.[1];
    return id === undefined ? [] : [id];
  });
  for (const id of ids) {
    const map = JSON.parse(execFileSync("bpftool", ["map", "show", "id", id, "-j"], { encoding: "utf8" })) as { name?: string };
    if (map.name !== "AT_failed_sends") continue;
    const entries = JSON.parse(execFileSync("bpftool", ["map", "dump", "id", id, "-j"], { encoding: "utf8" })) as { key: string[] }[];
    return entries.map((entry) => Number(Buffer.from(entry.key.slice(0, 8).map((byte) => Number(byte))).readBigUInt64LE()));
  }
  throw new Error(`bpftrace ${probePid} holds no AT_failed_sends map`);
}
