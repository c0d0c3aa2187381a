// A target is traced from its exec, not from the agent's next /proc scan:
// short-lived clients (kubectl, a one-shot script) that start after the agent
// is ready, write into a reset apiserver connection 50 ms after exec and are
// gone 300 ms later, are each counted, 20 times out of 20. The rescan is set
// to a minute, so only the exec path can find them. A process whose name the
// rules do not match, doing the same, is dropped again and never reported.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, rm, symlink } from "node:fs/promises";
import { realpathSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { faultyApiserver } from "./support/faultyApiserver.ts";
import { startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { assertKernelRequirements, skipWithoutKernel } from "./support/kernelRequirements.ts";

const CLIENT = path.join(path.dirname(fileURLToPath(import.meta.url)), "clients/lw_short_lived.py");
const RUNS = 20;

/** Runs one short-lived client to its end; its pid and what its write into the dead connection got. */
function runClient(program: string, port: number): Promise<{ pid: number; writeErrno: string | null }> {
  return new Promise((resolve, reject) => {
    const child = spawn(program, [CLIENT, String(port), "50", "300"], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
    child.once("error", reject);
    child.once("exit", (code) => {
      if (code !== 0) return reject(new Error(`client exited with ${code}`));
      const { write_errno } = JSON.parse(out) as { write_errno: string | null };
      resolve({ pid: child.pid!, writeErrno: write_errno });
    });
  });
}

describe("targets from their exec", { skip: skipWithoutKernel(), timeout: 240_000 }, () => {
  let dir: string;
  let server: net.Server;
  let port: number;
  let agent: AgentProcess;

  before(async () => {
    assertKernelRequirements();
    dir = await mkdtemp(path.join(os.tmpdir(), "lostwrite-exec-"));
    // The kernel names a process after the file it exec'd: a link gives the
    // python client a name of its own, which the rules match or not.
    const python = realpathSync("/usr/bin/python3");
    await symlink(python, path.join(dir, "lw-short"));
    await symlink(python, path.join(dir, "lw-other"));
    server = await faultyApiserver();
    port = (server.address() as net.AddressInfo).port;
    agent = await startAgentProcess([
      "--target-comm", "^lw-short$",
      "--apiserver", `127.0.0.1:${port}`,
      "--rescan-interval", "1m",
      "--correlation-window", "200ms",
    ]);
  });

  after(async () => {
    await agent?.stop();
    server?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it(`counts every one of ${RUNS} clients that live 300 ms and write into a reset connection 50 ms after exec`, async () => {
    const runs = [];
    for (let i = 0; i < RUNS; i++) runs.push(await runClient(path.join(dir, "lw-short"), port));
    // The fixture did what it says: each write met the dead connection.
    for (const run of runs) assert.ok(run.writeErrno === "EPIPE" || run.writeErrno === "ECONNRESET", `client ${run.pid}: ${run.writeErrno}`);
    const pids = runs.map((r) => r.pid);
    await waitFor(`a loss for each of the ${RUNS} clients`, () => pids.every((pid) => agent.events.some((e) => e.pid === pid)), 15_000).catch(() => undefined);
    const counted = pids.filter((pid) => agent.events.some((e) => e.pid === pid));
    assert.equal(counted.length, RUNS, `counted ${counted.length} of ${RUNS}; missed pids ${pids.filter((p) => !counted.includes(p)).join(", ")}`);
    // One lost request, one event: the write into the dead connection is part of the reset.
    for (const pid of pids) assert.equal(agent.events.filter((e) => e.pid === pid).length, 1, `pid ${pid}: ${JSON.stringify(agent.events.filter((e) => e.pid === pid))}`);
    for (const e of agent.events) assert.equal(e.process, "lw-short");
  });

  it("keeps tracing a target that execs another program the rules match", async () => {
    // lw-short runs python, which execs lw-short again: one pid, two execs, both targets.
    const reexec = "import os, sys; os.execv(sys.argv[1], sys.argv[1:])";
    const program = path.join(dir, "lw-short");
    const run = await new Promise<{ pid: number; writeErrno: string | null }>((resolve, reject) => {
      const child = spawn(program, ["-c", reexec, program, CLIENT, String(port), "300", "600"], { stdio: ["ignore", "pipe", "inherit"] });
      let out = "";
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
      child.once("error", reject);
      child.once("exit", () => resolve({ pid: child.pid!, writeErrno: (JSON.parse(out) as { write_errno: string | null }).write_errno }));
    });
    assert.ok(run.writeErrno === "EPIPE" || run.writeErrno === "ECONNRESET", String(run.writeErrno));
    await waitFor("the re-exec'd target's loss", () => agent.events.some((e) => e.pid === run.pid), 10_000);
  });

  it("drops a process the rules do not match, traced for a moment at its exec", async () => {
    const others = [];
    for (let i = 0; i < 3; i++) others.push(await runClient(path.join(dir, "lw-other"), port));
    for (const run of others) assert.ok(run.writeErrno === "EPIPE" || run.writeErrno === "ECONNRESET", `client ${run.pid}: ${run.writeErrno}`);
    await new Promise((r) => setTimeout(r, 1500));
    const pids = others.map((r) => r.pid);
    assert.deepEqual(agent.events.filter((e) => pids.includes(e.pid!)), []);
    assert.equal(await agent.metric("lostwrite_status_write_lost_total", { process: "lw-other" }), 0);
    assert.equal(await agent.metric("lostwrite_probe_control_failures_total"), 0);
    assert.equal((await fetch(`${agent.url}/readyz`)).status, 200);
  });
});
