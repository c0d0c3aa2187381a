// On the real kernel: a status write that never fails a syscall but
// dies with its connection. The testbed apiserver (real TLS, real TCP faults)
// is the server; each scenario's client is a separate python3 process speaking
// HTTP/1.1 over TLS on one keep-alive connection, under its own comm, so the
// agent targets it by name and every event and metric can be told apart by
// pid and by the `process` label. Each fault must be reported exactly once;
// every control (idle closes, an answered request before a reset, a process
// that is not a target) must report nothing.
//
// Each client is followed by a TLS program before it connects, as an
// operator that has run for a while is: its losses then carry what TLS says
// is unanswered, the plaintext the client handed to OpenSSL. (Before a TLS
// program follows a process, the socket path counts bytes on the wire; a
// test that started its client at once saw one or the other, depending on
// how fast the program attached.)
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import type { LossEvent } from "../../src/model.ts";
import { startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { NamedClients, type HttpsClient, type Step } from "./support/httpsClient.ts";
import { assertKernelRequirements, skipWithoutKernel } from "./support/kernelRequirements.ts";

/** Every client of this file is named lwc-*: the agent targets exactly those. */
const TARGET_COMM = "^lwc-";
/** A status PATCH the size operators send (a few conditions). */
const BODY_BYTES = 1500;
const CLIENT_TIMEOUT_S = 1.5;
const WIDGETS = "/apis/demo.lostwrite.dev/v1/namespaces";
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe("connection deaths with a request unanswered, on the real kernel", { skip: skipWithoutKernel(), timeout: 90_000 }, () => {
  let dir: string;
  let api: Apiserver;
  let agent: AgentProcess;
  let clients: NamedClients | undefined;
  /** A client whose comm is `comm`. */
  const client = (comm: string, timeoutS?: number): HttpsClient => clients!.client(comm, timeoutS);
  const eventsOf = (c: HttpsClient): LossEvent[] => agent.events.filter((e) => e.pid === c.pid);
  const losses = (c: HttpsClient, reason: string): Promise<number> =>
    agent.metric("lostwrite_apiserver_connection_losses_total", { process: c.comm, reason });
  /** Long enough for a close line to be judged, correlated (500 ms window) and logged. */
  const settle = (): Promise<void> => sleep(1500);

  before(async () => {
    assertKernelRequirements();
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-conn-"));
    api = await startApiserver({ dir });
    clients = new NamedClients(api.port, CLIENT_TIMEOUT_S);
    agent = await startAgentProcess([
      "--target-comm", TARGET_COMM,
      "--apiserver", `127.0.0.1:${api.port}`,
      "--correlation-window", "500ms",
      // What the probes printed, for a failure to show (see probeLinesOf).
      "--record", path.join(dir, "session.jsonl"),
    ]);
  });

  /** The probes' recorded lines that name the client's pid, and the probe's restarts: what a wrong verdict was made of. */
  async function probeLinesOf(c: HttpsClient): Promise<string> {
    const lines = readFileSync(path.join(dir, "session.jsonl"), "utf8").split("\n").filter((l) => l.includes(` ${c.pid} `) && !l.includes('"type\\": \\"map'));
    const restarts = await agent.metric("lostwrite_probe_restarts_total");
    return `\nprobe restarts: ${restarts}; connection losses: ${await losses(c, "timeout")} timeout, ${await losses(c, "reset")} reset\n${lines.slice(-20).join("\n")}`;
  }

  after(async () => {
    clients?.close();
    await agent?.stop();
    await api?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** Opens the keep-alive connection and proves it works with an answered request, as a long-lived client's would. */
  async function connectAndWarmUp(c: HttpsClient): Promise<Step> {
    await c.watchedBy(agent);
    await c.tlsFollowedBy(agent);
    const connected = await c.run("connect");
    const warmUp = await c.run("request GET /version 0");
    assert.equal(warmUp.status, 200, `warm-up request: ${JSON.stringify(warmUp)}`);
    assert.equal(warmUp.local, connected.local, "the warm-up request reused the connection");
    return connected;
  }

  /**
   * What TLS says a lost request left unanswered: every plaintext byte the
   * client handed to OpenSSL for it, nothing of the TLS framing, nor of an
   * alert OpenSSL sent on its own.
   */
  function assertUnansweredBytes(event: LossEvent, request: Step): void {
    assert.ok(request.records! >= 1 && request.sent! > BODY_BYTES, `request sent ${request.sent} bytes in ${request.records} record(s)`);
    assert.equal(event.unanswered_bytes, request.sent, `${request.sent} plaintext bytes handed to TLS`);
    assert.equal(event.bytes, event.unanswered_bytes);
  }

  it("(1) the server reads the whole status request, then resets: one connection_reset with the request's bytes", async () => {
    const c = client("lwc-reset");
    api.control.addRule({ id: "reset-status", method: "PATCH", path: `${WIDGETS}/reset/*/status`, action: "reset", afterBytes: BODY_BYTES });
    const connected = await connectAndWarmUp(c);
    const request = await c.run(`request PATCH ${WIDGETS}/reset/widgets/w1/status ${BODY_BYTES}`);
    // Python's ssl over OpenSSL 3 reports the RST while reading as an EOF (RemoteDisconnected).
    assert.ok(request.error === "ConnectionResetError" || request.error === "RemoteDisconnected", `client saw ${JSON.stringify(request)}`);
    const [fault] = api.faultLog().filter((f) => f.rule === "reset-status");
    assert.equal(fault?.bytesRead, BODY_BYTES, "the server read the whole body before the RST");
    assert.equal(fault.connection?.client, connected.local);

    await waitFor("the reset connection's loss event", () => eventsOf(c).length > 0);
    await settle();
    const events = eventsOf(c);
    assert.equal(events.length, 1, `exactly one event: ${JSON.stringify(events)}`);
    const [event] = events as [LossEvent];
    assert.equal(event.cause, "connection_reset");
    assert.equal(event.errno, "ECONNRESET");
    assert.equal(event.syscall, null, "no syscall failed: the connection died under the request");
    assert.equal(event.apiserver, `127.0.0.1:${api.port}`);
    assert.equal(event.process, "lwc-reset");
    assertUnansweredBytes(event, request);
    assert.ok(event.unanswered_for_ms! >= 0 && event.unanswered_for_ms! < 1000, `waited ${event.unanswered_for_ms} ms`);
    assert.equal(await losses(c, "reset"), 1);
    assert.equal(await losses(c, "closed_unanswered"), 0);
    assert.equal(await losses(c, "timeout"), 0);
    await c.exit();
  });

  it("(1b) the same, when the status write is the connection's first request", async () => {
    // A blocking client reads nothing until it has sent its request, so the
    // TLS 1.3 session tickets the server sent right after the handshake are
    // read only then, after the request: they are not an answer to it.
    const c = client("lwc-fresh");
    api.control.addRule({ id: "reset-fresh", method: "PATCH", path: `${WIDGETS}/fresh/*/status`, action: "reset", afterBytes: BODY_BYTES });
    await c.watchedBy(agent);
    await c.tlsFollowedBy(agent);
    const connected = await c.run("connect");
    assert.ok(connected.unread! > 0, `the server's post-handshake bytes wait unread: ${JSON.stringify(connected)}`);
    const request = await c.run(`request PATCH ${WIDGETS}/fresh/widgets/w1/status ${BODY_BYTES}`);
    assert.equal(request.status, null, `client saw ${JSON.stringify(request)}`);
    assert.equal(api.faultLog().filter((f) => f.rule === "reset-fresh").length, 1);
    await settle();
    const events = eventsOf(c);
    assert.equal(events.length, 1, `exactly one event: ${JSON.stringify(events)}; connection losses (reset): ${await losses(c, "reset")}; ${connected.unread} bytes were unread when the request went out`);
    assert.equal(events[0]!.cause, "connection_reset");
    assertUnansweredBytes(events[0]!, request);
    await c.exit();
  });

  it("(1c) the server resets on the headers while the client still writes its body: one connection_reset, the failed writes counted", async () => {
    // An HTTP/1.1 client writes the rest of its body into the dead socket:
    // those failures are the same lost request, not losses of their own.
    const BIG_BODY = 4 << 20;
    const c = client("lwc-midbody");
    api.control.addRule({ id: "reset-midbody", method: "PATCH", path: `${WIDGETS}/midbody/*/status`, action: "reset", afterBytes: 0 });
    await connectAndWarmUp(c);
    const request = await c.run(`request PATCH ${WIDGETS}/midbody/widgets/w1/status ${BIG_BODY}`, 20_000);
    assert.equal(request.status, null, `client saw ${JSON.stringify(request)}`);
    assert.ok(request.errno !== null || request.error, `the write failed: ${JSON.stringify(request)}`);
    await waitFor("the failed write counted", async () => (await agent.metric("lostwrite_apiserver_syscall_errors_total", { process: c.comm })) >= 1, 3000);
    await settle();
    const events = eventsOf(c);
    assert.deepEqual(events.map((e) => e.cause), ["connection_reset"], `exactly one event: ${JSON.stringify(events)}`);
    assert.equal(await losses(c, "reset"), 1);
    await c.exit();
  });

  it("(2) the server reads the request and closes without answering: one connection_closed_unanswered", async () => {
    const c = client("lwc-closed");
    api.control.addRule({ id: "close-status", method: "PATCH", path: `${WIDGETS}/closed/*/status`, action: "close" });
    await connectAndWarmUp(c);
    const request = await c.run(`request PATCH ${WIDGETS}/closed/widgets/w1/status ${BODY_BYTES}`);
    assert.equal(request.error, "RemoteDisconnected", `client saw ${JSON.stringify(request)}`);

    await waitFor("the closed connection's loss event", () => eventsOf(c).length > 0);
    await settle();
    const events = eventsOf(c);
    assert.equal(events.length, 1, `exactly one event: ${JSON.stringify(events)}`);
    const [event] = events as [LossEvent];
    // The apiserver's FIN came first: it closed, not the client.
    assert.equal(event.cause, "connection_closed_unanswered");
    assert.equal(event.errno, null, "a clean FIN carries no error");
    assert.equal(event.syscall, null);
    assertUnansweredBytes(event, request);
    assert.equal(await losses(c, "closed_unanswered"), 1);
    assert.equal(await losses(c, "reset") + (await losses(c, "closed_by_client")), 0);
    await c.exit();
  });

  it("(3) the server stops answering, the client times out and closes: one client_gave_up loss that waited the client's timeout", async () => {
    const c = client("lwc-timeout");
    // Far longer than the client waits; the answer, if it ever comes, finds the connection gone.
    api.control.addRule({ id: "slow-status", method: "PATCH", path: `${WIDGETS}/slow/*/status`, action: "delay", for: "10s" });
    await connectAndWarmUp(c);
    const request = await c.run(`request PATCH ${WIDGETS}/slow/widgets/w1/status ${BODY_BYTES}`);
    assert.equal(request.error, "TimeoutError", `client saw ${JSON.stringify(request)}`);

    await waitFor("the timed-out connection's loss event", () => eventsOf(c).length > 0);
    await settle();
    const events = eventsOf(c);
    assert.equal(events.length, 1, `exactly one event: ${JSON.stringify(events)}`);
    const [event] = events as [LossEvent];
    // The client closes with close(): its FIN came first, so the kernel knows
    // the client ended the connection, not the apiserver.
    assert.equal(event.cause, "client_gave_up");
    assert.equal(event.errno, null);
    assertUnansweredBytes(event, request);
    // The wait starts at the first byte of the request and ends when the
    // connection reaches CLOSE, right after the client gave up.
    const timeoutMs = CLIENT_TIMEOUT_S * 1000;
    assert.ok(event.unanswered_for_ms! >= timeoutMs && event.unanswered_for_ms! <= timeoutMs + 500,
      `unanswered for ${event.unanswered_for_ms} ms, client timeout ${timeoutMs} ms, client waited ${request.elapsed_ms} ms`);
    assert.equal(await losses(c, "closed_by_client"), 1);
    assert.equal(await losses(c, "reset") + (await losses(c, "timeout")) + (await losses(c, "closed_unanswered")), 0);
    await c.exit();
  });

  it("(3b) the server stops reading, the kernel gives up on the client's behalf: one loss, counted as a timeout", async () => {
    // An apiserver that stops reading: the request fills the server's receive
    // buffer and the client's send buffer, the window stays shut, and the
    // client's TCP_USER_TIMEOUT makes its kernel abort with ETIMEDOUT.
    const USER_TIMEOUT_MS = 1000;
    const BIG_BODY = 32 << 20;
    const c = client("lwc-stalled", 10);
    api.control.addRule({ id: "stall-status", method: "PATCH", path: `${WIDGETS}/stalled/*/status`, action: "stall" });
    const connected = await connectAndWarmUp(c);
    await c.run(`user_timeout ${USER_TIMEOUT_MS}`);
    const request = await c.run(`request PATCH ${WIDGETS}/stalled/widgets/w1/status ${BIG_BODY}`, 20_000);
    // OpenSSL 3 reports the kernel's ETIMEDOUT on write as an EOF (SSLEOFError); the event below has the errno.
    assert.ok(request.error && request.elapsed_ms! >= USER_TIMEOUT_MS, `the kernel gave up after the user timeout: ${JSON.stringify(request)}`);
    assert.equal(api.faultLog().filter((f) => f.rule === "stall-status").length, 1);
    // The server's side of the stalled connection stays open: drop it so later scenarios start clean.
    assert.deepEqual(api.control.dropConnections("reset").map((f) => f.connection?.client), [connected.local]);

    // Any event: a wrong cause then fails below, naming what came.
    await waitFor("the timed-out connection's loss event", () => eventsOf(c).length > 0);
    await settle();
    const events = eventsOf(c);
    const event = events.find((e) => e.cause === "connection_reset");
    assert.ok(event, `a connection_reset among ${JSON.stringify(events)}${event ? "" : await probeLinesOf(c)}`);
    assert.equal(event.errno, "ETIMEDOUT");
    // The whole request: the body the client was still writing when the kernel gave up is unanswered too.
    assertUnansweredBytes(event, request);
    assert.ok(event.unanswered_for_ms! >= USER_TIMEOUT_MS && event.unanswered_for_ms! <= request.elapsed_ms! + 100,
      `unanswered for ${event.unanswered_for_ms} ms, user timeout ${USER_TIMEOUT_MS} ms, client waited ${request.elapsed_ms} ms`);
    assert.equal(await losses(c, "timeout"), 1);
    assert.equal(await losses(c, "reset") + (await losses(c, "closed_unanswered")), 0);
    await c.exit();
    // One lost request, one event. The write() blocked on the shut window is
    // part of that same request; its -ETIMEDOUT is not a second loss.
    assert.deepEqual(events.map((e) => e.cause), ["connection_reset"], `exactly one event: ${JSON.stringify(events)}`);
  });

  it("(4a) a healthy keep-alive connection closed idle by the client: no loss, no connection loss", async () => {
    const c = client("lwc-idle-cli");
    const connected = await connectAndWarmUp(c);
    const second = await c.run(`request GET /version 0`);
    assert.equal(second.local, connected.local, "keep-alive: the same connection");
    await c.run("close");
    await settle();
    assert.deepEqual(eventsOf(c), []);
    for (const reason of ["reset", "timeout", "closed_unanswered", "closed_by_client"]) assert.equal(await losses(c, reason), 0, reason);
    // Not zero by blindness: the probe saw this connection's writes.
    await waitFor("the idle client's writes in /metrics", async () => (await agent.metric("lostwrite_apiserver_writes_total", { process: c.comm })) >= 3);
    await c.exit();
  });

  it("(4b) a healthy keep-alive connection closed idle by the server: no loss, no connection loss", async () => {
    const c = client("lwc-idle-srv");
    const connected = await connectAndWarmUp(c);
    const dropped = api.control.dropConnections("close");
    assert.deepEqual(dropped.map((f) => f.connection?.client), [connected.local], "the server closed exactly this connection");
    const eof = await c.run("wait_eof");
    assert.equal(eof.readable, true, `the client saw the close: ${JSON.stringify(eof)}`);
    await settle();
    assert.deepEqual(eventsOf(c), []);
    for (const reason of ["reset", "timeout", "closed_unanswered", "closed_by_client"]) assert.equal(await losses(c, reason), 0, reason);
    assert.ok((await agent.metric("lostwrite_apiserver_writes_total", { process: c.comm })) >= 2);
    await c.exit();
  });

  it("(5) a status write answered, then the connection reset: no loss event, one connection loss (reset)", async () => {
    const c = client("lwc-answered");
    const widget = {
      apiVersion: "demo.lostwrite.dev/v1", kind: "Widget",
      metadata: { namespace: "answered", name: "w1" }, spec: { size: 1 },
    };
    const created = await fetch(`${api.controlUrl}/objects`, { method: "POST", body: JSON.stringify(widget) });
    assert.equal(created.status, 200, await created.text());
    const connected = await connectAndWarmUp(c);
    const request = await c.run(`request PATCH ${WIDGETS}/answered/widgets/w1/status ${BODY_BYTES}`);
    assert.equal(request.status, 200, `the status write was answered: ${JSON.stringify(request)}`);
    const dropped = api.control.dropConnections("reset");
    assert.deepEqual(dropped.map((f) => f.connection?.client), [connected.local]);
    const eof = await c.run("wait_eof");
    assert.equal(eof.readable, true, `the client saw the reset: ${JSON.stringify(eof)}`);
    await waitFor("the reset counted as a connection loss", async () => (await losses(c, "reset")) === 1);
    await settle();
    assert.deepEqual(eventsOf(c), [], "the answered request is not a loss");
    assert.equal(await losses(c, "reset"), 1);
    assert.equal(await losses(c, "closed_unanswered"), 0);
    await c.exit();
  });

  it("(6) a request the kernel had to retransmit, then reset: the loss carries the retransmits, and so does the process's counter", async () => {
    // The client withholds the request's first transmission (TCP repair
    // mode), so the kernel retransmits it: a real retransmit on loopback. With
    // two segments out (headers, body) the tail loss probe fires after ~10 ms
    // and SACK recovery resends the rest; with one, the RTO after ~200 ms.
    const c = client("lwc-retrans");
    api.control.addRule({ id: "reset-retrans", method: "PATCH", path: `${WIDGETS}/retrans/*/status`, action: "reset", afterBytes: BODY_BYTES });
    await connectAndWarmUp(c);
    const request = await c.run(`request_retransmitted PATCH ${WIDGETS}/retrans/widgets/w1/status ${BODY_BYTES}`);
    assert.equal(request.status, null, `client saw ${JSON.stringify(request)}`);
    assert.equal(api.faultLog().filter((f) => f.rule === "reset-retrans").length, 1);

    await waitFor("the retransmitted request's loss event", () => eventsOf(c).length > 0);
    await settle();
    const events = eventsOf(c);
    assert.equal(events.length, 1, `exactly one event: ${JSON.stringify(events)}`);
    const [event] = events as [LossEvent];
    assert.equal(event.cause, "connection_reset");
    assertUnansweredBytes(event, request);
    assert.ok(event.retransmits! >= 1, `retransmits in the event: ${event.retransmits}`);
    // Every retransmit of this process happened on this connection, while the request waited.
    await waitFor("the retransmits in /metrics (1 s counter tick)", async () =>
      (await agent.metric("lostwrite_apiserver_retransmits_total", { process: c.comm })) >= event.retransmits!);
    assert.equal(await agent.metric("lostwrite_apiserver_retransmits_total", { process: c.comm }), event.retransmits);
    assert.equal(await losses(c, "reset"), 1);
    await c.exit();
  });

  it("ignores a process that is not a target, and reports nothing it was not given", async () => {
    // Same fault as (1), from a comm outside the target rule.
    const c = client("lwx-reset");
    api.control.addRule({ id: "reset-control", method: "PATCH", path: `${WIDGETS}/control/*/status`, action: "reset", afterBytes: BODY_BYTES });
    await sleep(2500); // the agent's rescans, as long as a target takes to be found
    assert.ok(!agent.stderr.some((line) => line.includes(`lwx-reset[${c.pid}]`)), "not a target");
    await c.run("connect");
    await c.run("request GET /version 0");
    const request = await c.run(`request PATCH ${WIDGETS}/control/widgets/w1/status ${BODY_BYTES}`);
    assert.equal(request.status, null, `the request failed: ${JSON.stringify(request)}`);
    await settle();
    await c.exit();

    const samples = await agent.metrics();
    for (const key of samples.keys()) assert.ok(!key.includes('process="lwx-reset"'), `non-target in ${key}`);
    // Exactly the losses injected, one each, from the processes they were
    // injected into (lwc-fresh and lwc-stalled are held to the same rule by their own tests).
    const byProcess = agent.events.filter((e) => e.process !== "lwc-fresh" && e.process !== "lwc-stalled").map((e) => `${e.process}:${e.cause}`).sort();
    assert.deepEqual(byProcess, [
      "lwc-closed:connection_closed_unanswered",
      "lwc-midbody:connection_reset",
      "lwc-reset:connection_reset",
      "lwc-retrans:connection_reset",
      "lwc-timeout:client_gave_up",
    ]);
    // Only the withheld request was retransmitted (and, maybe, the stalled
    // one's last segment: its kernel probes a shut window until it gives up;
    // and the mid-body one's tail: a client writing a large body to a server
    // that stopped reading may have its tail retransmitted before the reset
    // arrives, seen once in CI on a busy machine). Never a non-target's.
    const retransmitting = [...(await agent.metrics()).entries()]
      .filter(([key, value]) => key.startsWith("lostwrite_apiserver_retransmits_total{") && value > 0)
      .map(([key]) => /process="([^"]*)"/.exec(key)?.[1])
      .filter((comm) => comm !== "lwc-stalled" && comm !== "lwc-midbody");
    assert.deepEqual(retransmitting, ["lwc-retrans"]);
    assert.equal(await agent.metric("lostwrite_probe_parse_errors_total"), 0);
    assert.equal(await agent.metric("lostwrite_probe_up"), 1);
  });
});
