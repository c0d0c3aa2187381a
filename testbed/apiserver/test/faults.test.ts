// Each fault does what it says at the socket level, seen by real clients on
// loopback: RST, FIN without an answer, connect refused, a status answer, a
// delayed answer, a send buffer that fills up. Every fault lands in the log.
import assert from "node:assert/strict";
import { once } from "node:events";
import { readFile } from "node:fs/promises";
import http2 from "node:http2";
import net from "node:net";
import path from "node:path";
import { after, before, beforeEach, describe, it } from "node:test";
import tls from "node:tls";
import { parseScenario } from "../scenario.ts";
import { h1, h2, startTestApiserver, widget, WIDGETS_PATH, type TestServer } from "./support.ts";

let server: TestServer;
before(async () => { server = await startTestApiserver(); });
after(async () => { await server.close(); });
beforeEach(() => server.control.clearRules());

async function rawTls(): Promise<tls.TLSSocket> {
  const socket = tls.connect({ host: server.host, port: server.port, ca: server.ca, ALPNProtocols: ["http/1.1"] });
  await once(socket, "secureConnect");
  return socket;
}

function requestHead(method: string, urlPath: string, contentLength: number): string {
  return `${method} ${urlPath} HTTP/1.1\r\nHost: testbed\r\nContent-Type: application/merge-patch+json\r\nContent-Length: ${contentLength}\r\n\r\n`;
}

/** Everything the socket receives until it ends or fails. */
function outcome(socket: tls.TLSSocket): Promise<{ received: string; error: NodeJS.ErrnoException | null }> {
  return new Promise((resolve) => {
    let received = "";
    socket.on("data", (chunk: Buffer) => { received += chunk.toString(); });
    socket.on("error", (error: NodeJS.ErrnoException) => resolve({ received, error }));
    socket.on("end", () => resolve({ received, error: null }));
  });
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const STATUS_PATH = `${WIDGETS_PATH}/faulty/status`;
const BODY = JSON.stringify({ status: { phase: "Ready" } });

void describe("connection faults", () => {
  void it("reset: the client sees ECONNRESET and no answer; the log names its connection", async () => {
    server.control.addRule({ id: "rst", method: "PATCH", path: "*/status", action: "reset", expect: { cause: "connection_reset" } });
    const socket = await rawTls();
    const localPort = socket.localPort;
    const result = outcome(socket);
    socket.write(requestHead("PATCH", STATUS_PATH, BODY.length) + BODY);
    const { received, error } = await result;
    assert.equal(error?.code, "ECONNRESET");
    assert.equal(received, "");
    const [record] = server.faultLog().filter((r) => r.rule === "rst");
    assert.equal(record?.action, "reset");
    assert.equal(record?.method, "PATCH");
    assert.equal(record?.path, STATUS_PATH);
    assert.equal(record?.protocol, "http/1.1");
    assert.equal(record?.connection?.client, `127.0.0.1:${localPort}`);
    assert.deepEqual(record?.expect, { cause: "connection_reset" });
    assert.match(record?.monotonicNs ?? "", /^\d+$/);
  });

  void it("reset after N bytes: nothing happens before N body bytes arrive", async () => {
    server.control.addRule({ id: "rst-100", method: "PATCH", path: STATUS_PATH, action: "reset", afterBytes: 100 });
    const socket = await rawTls();
    const result = outcome(socket);
    socket.write(requestHead("PATCH", STATUS_PATH, 200) + "x".repeat(50));
    await sleep(150);
    assert.equal(socket.destroyed, false, "reset before 100 bytes were read");
    socket.write("x".repeat(60));
    const { error } = await result;
    assert.equal(error?.code, "ECONNRESET");
    const record = server.faultLog().find((r) => r.rule === "rst-100");
    assert.ok((record?.bytesRead ?? 0) >= 100);
  });

  void it("close: the whole request is read, then EOF without a byte of answer", async () => {
    server.control.addRule({ id: "fin", method: "PATCH", path: "*/status", action: "close" });
    const socket = await rawTls();
    const result = outcome(socket);
    socket.write(requestHead("PATCH", STATUS_PATH, BODY.length) + BODY);
    const { received, error } = await result;
    assert.equal(error, null);
    assert.equal(received, "");
    assert.equal(server.faultLog().find((r) => r.rule === "fin")?.bytesRead, BODY.length);
  });

  void it("refuse: connects fail with ECONNREFUSED for the given time, then work again", async () => {
    const res = await fetch(`${server.controlUrl}/refuse`, { method: "POST", body: JSON.stringify({ for: "400ms" }) });
    assert.equal(res.status, 200);
    const refused = net.connect(server.port, server.host);
    const [error] = (await once(refused, "error")) as [NodeJS.ErrnoException];
    assert.equal(error.code, "ECONNREFUSED");
    await sleep(500);
    assert.equal((await h1(server, "GET", "/version")).status, 200);
  });

  void it("refuse from a rule with existing: reset models an apiserver crash", async () => {
    server.control.addRule({ id: "crash", method: "PATCH", path: "*/status", action: "refuse", for: 300, existing: "reset" });
    const socket = await rawTls();
    const result = outcome(socket);
    socket.write(requestHead("PATCH", STATUS_PATH, BODY.length) + BODY);
    assert.equal((await result).error?.code, "ECONNRESET");
    const refused = net.connect(server.port, server.host);
    assert.equal(((await once(refused, "error")) as [NodeJS.ErrnoException])[0].code, "ECONNREFUSED");
    const record = server.faultLog().find((r) => r.rule === "crash");
    assert.match(record?.detail ?? "", /listener closed for 300 ms, 1 open connection\(s\) reset/);
    await sleep(400);
  });

  void it("stall: the server stops reading and the client's writes stop draining", async () => {
    server.control.addRule({ id: "stall", method: "PATCH", path: "*/status", action: "stall" });
    const socket = await rawTls();
    socket.on("error", () => undefined);
    socket.write(requestHead("PATCH", STATUS_PATH, 256 * 1024 * 1024));
    const chunk = Buffer.alloc(64 * 1024, 120);
    let written = 0;
    let blocked = false;
    while (written < 128 * 1024 * 1024) {
      written += chunk.length;
      if (socket.write(chunk)) continue;
      const drained = await Promise.race([once(socket, "drain").then(() => true), sleep(300).then(() => false)]);
      if (!drained) {
        blocked = true;
        break;
      }
    }
    assert.ok(blocked, `writes kept draining after ${written} bytes`);
    assert.ok(socket.writableLength > 0);
    assert.equal(server.faultLog().filter((r) => r.rule === "stall").length, 1);
    socket.destroy();
  });

  void it("stall for a time: the answer comes late but comes", async () => {
    server.control.addRule({ id: "stall-250", path: "/version", action: "stall", for: "250ms" });
    const start = Date.now();
    const answer = await h1(server, "GET", "/version");
    assert.equal(answer.status, 200);
    assert.ok(Date.now() - start >= 240);
  });

  void it("a reset on HTTP/2 kills every stream on that connection", async () => {
    await h2(server, "POST", WIDGETS_PATH, widget("h2-victim"));
    server.control.addRule({ id: "h2-rst", method: "PATCH", path: `${WIDGETS_PATH}/h2-victim/status`, action: "reset" });
    const session = http2.connect(server.url, { ca: server.ca });
    session.on("error", () => undefined);
    const watch = session.request({ ":path": `${WIDGETS_PATH}?watch=1` });
    const watchClosed = new Promise<number>((resolve) => { watch.on("error", () => undefined); watch.on("close", () => resolve(watch.rstCode ?? -1)); });
    await once(watch, "response");
    await assert.rejects(h2(server, "PATCH", `${WIDGETS_PATH}/h2-victim/status`, { status: { phase: "X" } }, "application/merge-patch+json", session));
    await watchClosed;
    assert.ok(session.destroyed || session.closed);
    assert.equal(server.faultLog().find((r) => r.rule === "h2-rst")?.protocol, "h2");
  });
});

void describe("answer faults", () => {
  void it("status: answers the code with a Kubernetes Status body", async () => {
    server.control.addRule({ method: "PATCH", path: "*/status", action: "status", code: 429, retryAfterSeconds: 1, count: 2 });
    await h2(server, "POST", WIDGETS_PATH, widget("limited"));
    for (let i = 0; i < 2; i++) {
      const answer = await h1(server, "PATCH", `${WIDGETS_PATH}/limited/status`, { status: { phase: "X" } }, "application/merge-patch+json");
      assert.equal(answer.status, 429);
      assert.equal(answer.headers["retry-after"], "1");
      assert.deepEqual(answer.body, {
        kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", reason: "TooManyRequests", code: 429,
        message: "fault injected by testbed rule rule-1", details: { retryAfterSeconds: 1 },
      });
    }
    // count: 2 is used up; the third request goes through.
    assert.equal((await h1(server, "PATCH", `${WIDGETS_PATH}/limited/status`, { status: { phase: "X" } }, "application/merge-patch+json")).status, 200);
  });

  void it("delay: the answer is held for the given time", async () => {
    server.control.addRule({ path: "/version", action: "delay", for: 300 });
    const start = Date.now();
    assert.equal((await h2(server, "GET", "/version")).status, 200);
    assert.ok(Date.now() - start >= 290);
  });

  void it("skip and method select which request is faulted", async () => {
    server.control.addRule({ id: "third-get", method: "GET", path: "/version", skip: 2, action: "status", code: 500 });
    const codes = [];
    for (let i = 0; i < 4; i++) codes.push((await h1(server, "GET", "/version")).status);
    assert.deepEqual(codes, [200, 200, 500, 200]);
    assert.equal((await h1(server, "POST", "/version")).status, 404);
  });
});

void describe("fault log and rules", () => {
  void it("writes the same records as JSON lines, to the file and on the control API", async () => {
    server.control.addRule({ id: "logged", path: "/version", action: "status", code: 500 });
    await h1(server, "GET", "/version");
    await sleep(50);
    const fromFile = (await readFile(path.join(server.dir, "faults.jsonl"), "utf8")).trim().split("\n").map((line) => JSON.parse(line) as { rule: string; seq: number });
    const fromApi = (await (await fetch(`${server.controlUrl}/faults.jsonl`)).text()).trim().split("\n").map((line) => JSON.parse(line) as { rule: string; seq: number });
    assert.deepEqual(fromFile, fromApi);
    assert.deepEqual(fromApi.map((r) => r.seq), server.faultLog().map((r) => r.seq));
    const last = fromApi.at(-1);
    const since = await (await fetch(`${server.controlUrl}/faults?since=${(last?.seq ?? 1) - 1}`)).json() as { faults: { rule: string }[] };
    assert.deepEqual(since.faults.map((r) => r.rule), ["logged"]);
  });

  void it("rejects bad rules naming the key and the value", async () => {
    const res = await fetch(`${server.controlUrl}/rules`, { method: "POST", body: JSON.stringify({ action: "status", code: "409", colour: "red" }) });
    assert.equal(res.status, 400);
    const { error } = await res.json() as { error: string };
    assert.match(error, /code: .*expected number.*\(got "409"\)/);
    assert.match(error, /keys "colour"/);
    assert.throws(() => parseScenario("rules:\n  - action: reset\n    at: soon\n", "s.yaml"), /s\.yaml: rules\.0\.at: .*\(got "soon"\)/);
  });

  void it("arms scenario rules after their `at` delay", async () => {
    const scenario = parseScenario("description: late\nrules:\n  - id: late\n    path: /version\n    action: status\n    code: 503\n    at: 200ms\n");
    server.control.loadScenario(scenario);
    assert.equal((await h1(server, "GET", "/version")).status, 200);
    await sleep(250);
    assert.equal((await h1(server, "GET", "/version")).status, 503);
  });
});
