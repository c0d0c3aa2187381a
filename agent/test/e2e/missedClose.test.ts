// A connection's close that the kernel never ran the state probe for is still
// reported as what it was. The kernel runs no BPF program on a CPU where one
// is running already: a tracepoint hit from softirq (a TCP timer giving up on
// a connection) in the middle of another program's run is dropped, counted
// only in the program's recursion_misses. Here another BPF tool runs long
// programs on every CPU, most of the time, as a busy node's tracers can, while
// a client's apiserver stops reading and its kernel gives up on the
// connection (TCP_USER_TIMEOUT). Without the socket probe's MISSED CLOSE
// recovery the loss came out as `write_failed ETIMEDOUT` with no request
// bytes, or not at all; it must be one `connection_reset` with ETIMEDOUT and
// every byte the client's kernel accepted unanswered.
//
// The probes' once-a-second timer tick runs in an interrupt and is skipped the
// same way, for seconds on end here. The agent took that silence for a hung
// bpftrace and restarted it: blind while the new one compiled, and without
// the connections the old one knew, so whole losses went missing. It must ask
// the program instead (it answers), restart nothing, and count the ticks.
//
// A connect that times out (its last SYN's timer, softirq too) is missed the
// same way: it must still be one `connect_failed` with ETIMEDOUT.
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it, type TestContext } from "node:test";
import { fileURLToPath } from "node:url";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import { recursionMisses } from "../../src/sources/probe/missedRuns.ts";
import { startAgentProcess, sumMetric, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { NamedClients } from "./support/httpsClient.ts";
import { assertKernelRequirements, skipWithoutKernel } from "./support/kernelRequirements.ts";

const CLIENT = path.join(path.dirname(fileURLToPath(import.meta.url)), "clients/stall_writer.py");
const BLACKHOLE = path.join(path.dirname(fileURLToPath(import.meta.url)), "clients/syn_blackhole.py");
const USER_TIMEOUT_MS = 500;
/** Stalled connections at most, until the kernel has skipped a close on one of them. */
const MAX_ATTEMPTS = 30;
const SPIN = "lw-spin";
/**
 * The other tool: a program of about a millisecond on each getppid() of a
 * spinning process. The loop's map update keeps LLVM from folding it away;
 * 5000 iterations stay well inside the verifier's instruction budget.
 */
const LONG_PROGRAM = `tracepoint:syscalls:sys_enter_getppid /comm == "${SPIN}"/ { $i = 0; while ($i < 5000) { @last = $i; $i++; } }`;
/**
 * A process per CPU, pinned, calling getppid() as fast as it can: each CPU
 * mostly inside LONG_PROGRAM. Started under `setpriv --pdeathsig KILL`, as the
 * other tool is, so a test killed at its timeout leaves no spinning CPU behind.
 */
const SPINNER = `import ctypes, os, sys
os.sched_setaffinity(0, {int(sys.argv[1])})
ctypes.CDLL(None).prctl(15, b"${SPIN}", 0, 0, 0)
while True:
    os.getppid()`;

/** Runs of the agent's probe programs the kernel skipped: recursion_misses of every bpftrace the agent runs. */
async function skippedProbeRuns(agentPid: number): Promise<number> {
  let children: string[] = [];
  try {
    children = execFileSync("pgrep", ["-P", String(agentPid), "-x", "bpftrace"], { encoding: "utf8" }).split("\n").filter(Boolean);
  } catch {
    // pgrep exits 1 when none runs (between a restart's two instances).
  }
  let total = 0;
  for (const pid of children) total += await recursionMisses(Number(pid));
  return total;
}

interface Stalled {
  local: string;
  sent: number;
  errno: number;
}

describe("a close the kernel skipped the state probe for, on the real kernel", { skip: skipWithoutKernel(), timeout: 240_000 }, () => {
  let dir: string;
  let server: net.Server;
  let agent: AgentProcess;
  let client: string;
  /** The testbed apiserver over TLS, for a client on OpenSSL that a TLS program follows. */
  let api: Apiserver;
  let tlsClients: NamedClients;
  const others: ChildProcess[] = [];
  /** The connections the apiserver that never reads holds. */
  const held: net.Socket[] = [];
  /** An apiserver address whose SYNs are dropped. */
  let blackholePort: number;

  before(async () => {
    assertKernelRequirements();
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-missed-close-"));
    const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
    client = path.join(dir, "lw-stall");
    symlinkSync(python, client);
    // An apiserver that never reads: the window shuts and the client's kernel gives up.
    server = net.createServer({ pauseOnConnect: true }, (socket) => held.push(socket));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as net.AddressInfo).port;
    const blackhole = spawn("setpriv", ["--pdeathsig", "KILL", "python3", BLACKHOLE], { stdio: ["pipe", "pipe", "inherit"] });
    others.push(blackhole);
    let blackholeOut = "";
    blackhole.stdout.setEncoding("utf8").on("data", (chunk: string) => (blackholeOut += chunk));
    await waitFor("the SYN-dropping listener's port", () => blackholeOut.includes("\n"), 10_000);
    blackholePort = Number(blackholeOut.trim());
    api = await startApiserver({ dir });
    tlsClients = new NamedClients(api.port, 10);
    agent = await startAgentProcess([
      "--target-comm", "^(lw-stall|lwc-stall-tls[0-9]+)$",
      "--apiserver", `127.0.0.1:${port}`,
      "--apiserver", `127.0.0.1:${api.port}`,
      "--apiserver", `127.0.0.1:${blackholePort}`,
      "--correlation-window", "500ms",
    ]);

    const tool = spawn("setpriv", ["--pdeathsig", "KILL", "bpftrace", "-e", LONG_PROGRAM], { stdio: ["ignore", "pipe", "pipe"] });
    others.push(tool);
    let toolOut = "";
    tool.stdout.setEncoding("utf8").on("data", (chunk: string) => (toolOut += chunk));
    await waitFor("the other tool's program attached", () => toolOut.includes("Attaching 1 probe"), 60_000);
    for (let cpu = 0; cpu < os.availableParallelism(); cpu++) {
      others.push(spawn("setpriv", ["--pdeathsig", "KILL", "python3", "-c", SPINNER, String(cpu)], { stdio: "ignore" }));
    }
  });

  after(async () => {
    for (const other of others) other.kill("SIGKILL");
    tlsClients?.close();
    await agent?.stop();
    server?.close();
    for (const socket of held) socket.destroy();
    await api?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /**
   * Stalls connections of `mode` one after another, each with its own client,
   * until one ran while the kernel skipped socket probe runs; each must give
   * exactly one right event. `eventWhile` says when it must have come: while
   * the dead socket is still open (the failed send found the skipped close),
   * or once the client has closed it (the socket's release found it).
   */
  async function stallUntilSkipped(t: TestContext, mode: "send" | "read" | "connect", eventWhile: "open" | "released"): Promise<void> {
    const port = mode === "connect" ? blackholePort : (server.address() as net.AddressInfo).port;
    const skipped = (): Promise<number> => skippedProbeRuns(agent.child.pid!);
    let attemptsWithSkips = 0;
    let attempts = 0;
    /** Attempts whose event came while the socket was open: for a connect, the state probe saw the failure. */
    let seenOpen = 0;
    while (attempts < MAX_ATTEMPTS && attemptsWithSkips === 0) {
      attempts++;
      const skippedBefore = await skipped();
      const writer = spawn(client, [CLIENT, mode, "127.0.0.1", String(port), String(USER_TIMEOUT_MS)], { stdio: ["pipe", "pipe", "inherit"] });
      let out = "";
      writer.stdout.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
      const exited = new Promise<void>((resolve) => writer.once("exit", () => resolve()));
      const eventOf = (): boolean => agent.events.some((e) => e.pid === writer.pid);
      await waitFor(`attempt ${attempts}: the client's kernel to give up`, () => out.includes("\n"), 30_000);
      const stalled = JSON.parse(out) as Stalled;
      assert.equal(stalled.errno, 110, `the ${mode} failed with ETIMEDOUT: ${out}`);
      if (eventWhile === "open") await waitFor(`attempt ${attempts}: the loss event, the socket still open`, eventOf, 15_000);
      if ((await skipped()) > skippedBefore) attemptsWithSkips++;
      if (eventOf()) seenOpen++;
      writer.stdin.end();
      await exited;
      if (eventWhile === "released") {
        await waitFor(`attempt ${attempts}: the loss event, the socket released`, eventOf, 15_000).catch((error: unknown) => {
          throw new Error(`${String(error)}; the agent's lines naming the client:\n${agent.stderr.filter((line) => line.includes(String(writer.pid))).join("\n")}`);
        });
      }

      const events = agent.events.filter((e) => e.pid === writer.pid);
      assert.equal(events.length, 1, `attempt ${attempts}: one event: ${JSON.stringify(events)}`);
      const [event] = events;
      if (mode === "connect") {
        assert.equal(event!.cause, "connect_failed", `attempt ${attempts}: ${JSON.stringify(event)}`);
        assert.equal(event!.errno, "ETIMEDOUT", `attempt ${attempts}: ${JSON.stringify(event)}`);
        assert.equal(event!.apiserver, `127.0.0.1:${blackholePort}`);
        continue;
      }
      assert.equal(event!.cause, "connection_reset", `attempt ${attempts}: ${JSON.stringify(event)}`);
      assert.equal(event!.errno, "ETIMEDOUT");
      assert.equal(event!.unanswered_bytes, stalled.sent, `attempt ${attempts}: every byte the client's kernel accepted is unanswered`);
    }
    t.diagnostic(`${attempts} stalled connections, ${attemptsWithSkips} of them while the kernel skipped socket probe runs, ${seenOpen} reported before the socket's release`);
    assert.ok(attemptsWithSkips > 0, `the other tool made the kernel skip none of the socket probe's runs in ${attempts} attempts`);
  }

  it("a client writing when its kernel gives up: one connection_reset (ETIMEDOUT) with the whole request, before the socket is released", (t) =>
    stallUntilSkipped(t, "send", "open"));

  it("a client waiting for the answer when its kernel gives up: the same loss, once the socket is released (the read took the error)", (t) =>
    stallUntilSkipped(t, "read", "released"));

  it("a client whose connect times out (its SYNs dropped): one connect_failed (ETIMEDOUT), by the socket's release at the latest", (t) =>
    stallUntilSkipped(t, "connect", "released"));

  it("a client on OpenSSL that a TLS program follows: the same loss, with the plaintext it handed to TLS unanswered", async (t) => {
    // connectionDeaths (3b)'s client and apiserver: a keep-alive HTTPS connection, one answered request, then a
    // status PATCH the server stops reading and the client's kernel gives up on after its TCP_USER_TIMEOUT.
    const skipped = (): Promise<number> => skippedProbeRuns(agent.child.pid!);
    const WIDGETS = "/apis/demo.lostwrite.dev/v1/namespaces/stalled/widgets";
    api.control.addRule({ id: "stall-status", method: "PATCH", path: `${WIDGETS}/*/status`, action: "stall", count: "always" });
    let attemptsWithSkips = 0;
    let attempts = 0;
    while (attempts < MAX_ATTEMPTS && attemptsWithSkips === 0) {
      attempts++;
      const c = tlsClients.client(`lwc-stall-tls${attempts}`, 10);
      await c.watchedBy(agent);
      await c.tlsFollowedBy(agent);
      await c.run("connect");
      assert.equal((await c.run("request GET /version 0")).status, 200);
      await c.run(`user_timeout ${USER_TIMEOUT_MS}`);
      const skippedBefore = await skipped();
      const request = await c.run(`request PATCH ${WIDGETS}/w${attempts}/status ${8 << 20}`, 20_000);
      assert.ok(request.error, `the kernel gave up: ${JSON.stringify(request)} ${JSON.stringify(api.faultLog())}`);
      await waitFor(`attempt ${attempts}: the loss event, the socket still open`, () => agent.events.some((e) => e.pid === c.pid), 15_000);
      if ((await skipped()) > skippedBefore) attemptsWithSkips++;
      api.control.dropConnections("reset");
      await c.exit();

      const events = agent.events.filter((e) => e.pid === c.pid);
      assert.equal(events.length, 1, `attempt ${attempts}: one event: ${JSON.stringify(events)}`);
      const [event] = events;
      assert.equal(event!.cause, "connection_reset", `attempt ${attempts}: ${JSON.stringify(event)}`);
      assert.equal(event!.errno, "ETIMEDOUT");
      assert.equal(event!.unanswered_bytes, request.sent, `attempt ${attempts}: the plaintext the client handed to TLS is unanswered`);
    }
    t.diagnostic(`${attempts} stalled TLS connections, ${attemptsWithSkips} of them while the kernel skipped probe runs`);
    assert.ok(attemptsWithSkips > 0, `the other tool made the kernel skip none of the probes' runs in ${attempts} attempts`);
  });

  it("restarts no probe while the kernel skips the probes' ticks for longer than the heartbeat: it asks, and the probe answers", async (t) => {
    const silenceNoticed = (): boolean => agent.stderr.some((line) => line.includes("the kernel skipped bpftrace's ticks"));
    await waitFor("the agent to find a probe's ticks silent for longer than its heartbeat (5 s) and ask it", silenceNoticed, 90_000);
    const samples = await agent.metrics();
    const restarts = ["lostwrite_probe_restarts_total", "lostwrite_go_probe_restarts_total", "lostwrite_tls_probe_restarts_total"]
      .map((name) => `${name} ${sumMetric(samples, name)}`)
      .filter((line) => !line.endsWith(" 0"));
    assert.deepEqual(restarts, [], `a probe restarted: ${agent.stderr.filter((line) => line.includes("restarting")).join("\n")}`);
    t.diagnostic(`skipped runs counted ${sumMetric(samples, "lostwrite_probe_missed_runs_total")}, recursion misses in the kernel now ${await skippedProbeRuns(agent.child.pid!)}`);
  });
});
