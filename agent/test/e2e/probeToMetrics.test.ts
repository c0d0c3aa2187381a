// Probe to metrics on the real kernel: the agent, run as a user runs it, sees
// every failed or zero-byte write and every failed connect of a target on an
// apiserver socket, and nothing else. Clients are real python3 processes
// (blocking sockets write into a reset connection); servers are real sockets.
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { freePort, startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { LW_CLIENT, runLwClient, watchedBy, type ClientStep } from "./support/lwClient.ts";
import { resetOnMarkerServer, tlsResetServer } from "./support/resetServers.ts";
import { assertKernelRequirements, skipWithoutKernel } from "./support/kernelRequirements.ts";



/**
 * The agent's targets. The EAGAIN test's client has a comm of its own: its
 * byte count is compared exactly, and a connection of an earlier test adds
 * its bytes to its comm's series at its close, which may come late (an
 * orphaned socket waits up to a minute in FIN_WAIT2).
 */
const TARGET_COMMS = ["lw-client", "lw-eagain"];

/**
 * Runs the test client under a given comm (a symlink to the real python
 * binary). It acts once the agent has had time to find it: for a target, when
 * the agent's target count has grown; for a non-target, after the same rescans.
 */
function runClient(agent: AgentProcess, binary: string, mode: string, port: number, host = "127.0.0.1"): Promise<ClientStep[]> {
  const comm = path.basename(binary);
  return runLwClient(binary, mode, port, (pid) =>
    TARGET_COMMS.includes(comm)
      ? watchedBy(agent, comm, pid, 5000)
      // A non-target leaves no line to wait for: the wait is the point, the
      // agent's rescans (every second here) get their chance to take it wrongly.
      : new Promise((r) => setTimeout(r, 2500)), host);
}

/** Reads nothing for a while (the client's send buffer fills: EAGAIN), then drains everything. */
const ANSWER_BODY = '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","answered":true}';
const APISERVER_SHAPED_ANSWER =
  "HTTP/1.1 200 OK\r\nAudit-Id: 4c1e8f0e-0d3c-4f7e-9a51-2f0b6f1f9d2a\r\nCache-Control: no-cache, private\r\n" +
  "Content-Type: application/json\r\nX-Kubernetes-Pf-Flowschema-Uid: 9b3c1b52-2f11-4c2e-8d4e-3f6c0c5a7e10\r\n" +
  "X-Kubernetes-Pf-Prioritylevel-Uid: 1f2e3d4c-5b6a-4798-8a7b-6c5d4e3f2a1b\r\nDate: Thu, 03 Dec 2026 12:00:00 GMT\r\n" +
  `Content-Length: ${ANSWER_BODY.length}\r\n\r\n${ANSWER_BODY}`;

async function slowReaderServer(): Promise<net.Server> {
  const server = net.createServer((socket) => {
    socket.pause();
    socket.on("error", () => undefined);
    let tail = "";
    socket.on("data", (data) => {
      tail = (tail + data.toString("latin1")).slice(-16);
      // An answer shaped like the apiserver's, headers and all: the probe takes
      // a segment under 96 bytes for protocol chatter, not a response.
      if (tail.endsWith("END")) socket.write(APISERVER_SHAPED_ANSWER);
    });
    setTimeout(() => socket.resume(), 1500);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return server;
}

const portOf = (server: net.Server): number => (server.address() as net.AddressInfo).port;

/**
 * Failed sends are counted in the kernel and printed with the counters once a
 * second: the counter shows a failure by the next print, plus the time to read it.
 */
const COUNTER_LATENCY_MS = 1500;

describe("probe → metrics on the real kernel", { skip: skipWithoutKernel(), timeout: 240_000 }, () => {
  let dir: string;
  let target: string;
  let control: string;
  let eagainClient: string;
  let agent: AgentProcess;
  let tlsServer: net.Server;
  let plainServer: net.Server;
  let otherServer: net.Server;
  let slowServer: net.Server;
  let refusedPort: number;
  let otherRefusedPort: number;
  let preexisting: ChildProcess;

  before(async () => {
    assertKernelRequirements();
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-e2e-"));
    // The kernel's comm is the name the binary was exec'd under: a symlink gives
    // the target and the control process distinct comms with the same code.
    const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
    target = path.join(dir, "lw-client");
    control = path.join(dir, "lw-control");
    eagainClient = path.join(dir, "lw-eagain");
    for (const comm of [target, control, eagainClient]) symlinkSync(python, comm);
    tlsServer = await tlsResetServer(path.join(dir, "certs"));
    plainServer = await resetOnMarkerServer();
    otherServer = await resetOnMarkerServer(); // not an apiserver
    slowServer = await slowReaderServer();
    refusedPort = await freePort();
    otherRefusedPort = await freePort();

    // A connection opened before the agent starts, as client-go's long-lived one is.
    preexisting = spawn(target, [LW_CLIENT, "wait_then_reset", "127.0.0.1", String(portOf(plainServer))], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    await new Promise<void>((resolve) => preexisting.stdout!.once("data", () => resolve()));

    agent = await startAgentProcess([
      "--target-comm", `^(${TARGET_COMMS.join("|")})$`,
      "--apiserver", `127.0.0.1:${portOf(tlsServer)}`,
      "--apiserver", `127.0.0.1:${portOf(plainServer)}`,
      "--apiserver", `127.0.0.1:${portOf(slowServer)}`,
      "--apiserver", `127.0.0.1:${refusedPort}`,
      "--correlation-window", "500ms",
    ]);
  });

  after(async () => {
    preexisting?.kill();
    await agent?.stop();
    for (const server of [tlsServer, plainServer, otherServer, slowServer]) server?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("covers a connection opened before the agent started", async () => {
    preexisting.stdin!.write("go\n");
    const steps = await new Promise<ClientStep[]>((resolve) => {
      let out = "";
      preexisting.stdout!.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
      preexisting.once("exit", () => resolve(out.split("\n").filter(Boolean).map((l) => JSON.parse(l) as ClientStep)));
    });
    const failed = steps.find((s) => s.step === "preexisting_after_reset");
    assert.ok(failed?.errno, `the client's write should fail, got ${JSON.stringify(steps)}`);
    await waitFor("the preexisting connection's failure in /metrics", async () =>
      (await agent.metric("lostwrite_apiserver_syscall_errors_total", { process: "lw-client", errno: failed.errno! })) >= 1,
    );
    // The connection died with the request unanswered: a loss of its own.
    await waitFor("the reset connection's loss event", () =>
      agent.events.some((e) => e.cause === "connection_reset" && e.apiserver === `127.0.0.1:${portOf(plainServer)}`),
    );
  });

  it("counts writes into a reset TLS connection with errno, process and syscall by the next counter print, and reports the lost request once", async () => {
    const before = await agent.metric("lostwrite_apiserver_syscall_errors_total", { process: "lw-client", syscall: "write" });
    const steps = await runClient(agent, target, "tls_reset", portOf(tlsServer));
    const failures = steps.filter((s) => s.step === "tls_write_after_reset" && s.errno);
    assert.ok(failures.length >= 1, `client writes should fail: ${JSON.stringify(steps)}`);
    const took = await waitFor("TLS write failures in /metrics", async () => {
      const now = await agent.metric("lostwrite_apiserver_syscall_errors_total", { process: "lw-client", syscall: "write" });
      return now - before >= failures.length;
    });
    assert.ok(took <= COUNTER_LATENCY_MS, `metrics showed the failures ${took} ms after the client exited`);
    await new Promise((r) => setTimeout(r, 1100)); // the next counter print adds nothing
    assert.equal(await agent.metric("lostwrite_apiserver_syscall_errors_total", { process: "lw-client", syscall: "write" }) - before, failures.length);
    // Python's ssl module reports its own error codes; the kernel's are these.
    const samples = await agent.metrics();
    const errnos = [...samples.keys()]
      .filter((k) => k.startsWith("lostwrite_apiserver_syscall_errors_total{") && k.includes('syscall="write"'))
      .map((k) => /errno="([^"]+)"/.exec(k)![1]);
    assert.ok(errnos.length > 0 && errnos.every((e) => e === "ECONNRESET" || e === "EPIPE"), `errnos ${errnos.join(",")}`);
    // One lost request: the request the server reset. The writes into the dead
    // connection after it are the same loss, counted above, not reported again.
    await waitFor("the loss event", () => agent.events.some((e) => e.apiserver === `127.0.0.1:${portOf(tlsServer)}`));
    await new Promise((r) => setTimeout(r, 1000));
    const events = agent.events.filter((e) => e.apiserver === `127.0.0.1:${portOf(tlsServer)}`);
    assert.deepEqual(events.map((e) => e.cause), ["connection_reset"], JSON.stringify(events));
  });

  it("reports sendto into a reset plain connection with the exact errnos, the request lost once", async () => {
    const lossesBefore = agent.events.filter((e) => e.apiserver === `127.0.0.1:${portOf(plainServer)}`).length;
    const steps = await runClient(agent, target, "plain_reset", portOf(plainServer));
    const failures = steps.filter((s) => s.step === "sendto_after_reset").map((s) => s.errno);
    assert.deepEqual(failures, ["ECONNRESET", "EPIPE"]);
    const took = await waitFor("sendto failures in /metrics", async () =>
      (await agent.metric("lostwrite_apiserver_syscall_errors_total", { process: "lw-client", syscall: "sendto", errno: "EPIPE" })) >= 1,
    );
    assert.ok(took <= COUNTER_LATENCY_MS, `metrics showed the failure after ${took} ms`);
    assert.ok((await agent.metric("lostwrite_apiserver_syscall_errors_total", { process: "lw-client", syscall: "sendto", errno: "ECONNRESET" })) >= 1);
    // The request that met the reset was under 64 bytes (protocol chatter to the
    // agent): the connection's death is no loss, so its first failed send is.
    // The second failure is on the same dead socket: counted, not a second loss.
    await waitFor("the write_failed event", () => agent.events.filter((e) => e.apiserver === `127.0.0.1:${portOf(plainServer)}`).length > lossesBefore);
    await new Promise((r) => setTimeout(r, 1000));
    const events = agent.events.filter((e) => e.apiserver === `127.0.0.1:${portOf(plainServer)}`).slice(lossesBefore);
    assert.deepEqual(events.map((e) => [e.cause, e.errno]), [["write_failed", "ECONNRESET"]]);
  });

  it("reports a refused connect", async () => {
    const [step] = await runClient(agent, target, "refused", refusedPort);
    assert.equal(step?.errno, "ECONNREFUSED");
    const took = await waitFor("connect failure in /metrics", async () =>
      (await agent.metric("lostwrite_apiserver_syscall_errors_total", { syscall: "connect", errno: "ECONNREFUSED", process: "lw-client" })) === 1,
    );
    assert.ok(took <= 1000, `metrics showed the refused connect after ${took} ms`);
    await waitFor("connect_failed event", () =>
      agent.events.some((e) => e.cause === "connect_failed" && e.apiserver === `127.0.0.1:${refusedPort}` && e.errno === "ECONNREFUSED"),
    );
  });

  it("reports a zero-byte send on an apiserver socket but not a zero-byte write to stdout", async () => {
    const steps = await runClient(agent, target, "zero", portOf(plainServer));
    assert.deepEqual(steps.map((s) => s.step), ["zero_send", "zero_stdout"]);
    await waitFor("zero_byte_write event", () =>
      agent.events.some((e) => e.cause === "zero_byte_write" && e.apiserver === `127.0.0.1:${portOf(plainServer)}`),
    );
    assert.equal(agent.events.filter((e) => e.cause === "zero_byte_write").length, 1, "exactly one zero-byte loss");
    await waitFor("the zero-byte send counted", async () =>
      (await agent.metric("lostwrite_apiserver_syscall_errors_total", { errno: "none", syscall: "sendto" })) >= 1, COUNTER_LATENCY_MS);
    await new Promise((r) => setTimeout(r, 1100));
    assert.equal(await agent.metric("lostwrite_apiserver_syscall_errors_total", { errno: "none", syscall: "sendto" }), 1);
  });

  it("counts EAGAIN on a non-blocking socket whose write later succeeds, without a loss, and its bytes exactly", async () => {
    const comm = "lw-eagain";
    const steps = await runClient(agent, eagainClient, "eagain", portOf(slowServer));
    assert.equal(steps.find((s) => s.step === "eagain")?.errno, "EAGAIN");
    assert.equal(steps.find((s) => s.step === "write_after_drain")?.errno, null);
    assert.ok(steps.some((s) => s.step === "answered"), `the server answers: ${JSON.stringify(steps)}`);
    await waitFor("EAGAIN counted", async () =>
      (await agent.metric("lostwrite_apiserver_syscall_errors_total", { errno: "EAGAIN", process: comm })) >= 1,
    );
    // Every byte the client's sends queued, counted once its connection closed.
    const sent = steps.find((s) => s.step === "eagain")!.sent! + steps.find((s) => s.step === "write_after_drain")!.sent!;
    assert.ok(sent > 65536, `the client sent ${sent} bytes`);
    await waitFor("the request's bytes counted", async () =>
      (await agent.metric("lostwrite_apiserver_write_bytes_total", { process: comm })) >= sent);
    // A wait on purpose: the check is that nothing more is added. Only a later counter
    // print (once a second) or the correlation window could add to the count, so it
    // spans one print and the window.
    await new Promise((r) => setTimeout(r, COUNTER_LATENCY_MS));
    assert.equal(await agent.metric("lostwrite_apiserver_write_bytes_total", { process: comm }), sent, "the bytes, counted once");
    assert.ok((await agent.metric("lostwrite_apiserver_writes_total", { process: comm })) > 0, "successful writes are counted");
    const losses = agent.events.filter((e) => e.apiserver === `127.0.0.1:${portOf(slowServer)}`);
    assert.deepEqual(losses, [], "EAGAIN is not a loss");
  });

  it("ignores the same failures on a non-apiserver port and from a non-target process", async () => {
    await runClient(agent, target, "plain_reset", portOf(otherServer));
    await runClient(agent, target, "refused", otherRefusedPort);
    await runClient(agent, control, "plain_reset", portOf(plainServer));
    await runClient(agent, control, "refused", refusedPort);
    // Let anything that would have been reported arrive: two heartbeats and the correlation window.
    await new Promise((r) => setTimeout(r, 2500));
    const samples = await agent.metrics();
    for (const key of samples.keys()) {
      assert.ok(!key.includes('process="lw-control"'), `non-target process in ${key}`);
    }
    const strays = agent.events.filter(
      (e) => e.process === "lw-control" || e.apiserver === `127.0.0.1:${portOf(otherServer)}` || e.apiserver === `127.0.0.1:${otherRefusedPort}`,
    );
    assert.deepEqual(strays, []);
    assert.equal(await agent.metric("lostwrite_apiserver_syscall_errors_total", { syscall: "connect" }), 1, "only the apiserver refusal");
    assert.equal(await agent.metric("lostwrite_probe_parse_errors_total"), 0);
    assert.equal(await agent.metric("lostwrite_probe_up"), 1);
  });
});
