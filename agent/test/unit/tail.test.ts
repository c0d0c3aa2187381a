// `lostwrite tail`: the line format (golden strings) and the client against a
// real feed on loopback, including an agent restart.
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { PassThrough } from "node:stream";
import { describe, it } from "node:test";
import { attachEventFeed, type EventFeed } from "../../src/sinks/feed.ts";
import { AgentMetrics } from "../../src/telemetry/metrics.ts";
import { feedUrl, formatEventLine, runTail, shouldColor } from "../../src/tail.ts";
import { sampleEvent } from "./sinks/sampleEvent.ts";

void describe("formatEventLine", () => {
  void it("prints time, cause, pod, errno, controller and object, noticed, trace id", () => {
    assert.equal(
      formatEventLine(sampleEvent(), false),
      "2026-12-02T15:04:05.123456Z  write_failed                  ops/widget-operator-7d9  EPIPE  widget Widget default/w1  SILENT  trace=4bf92f3577b34da6a3ce929d0e0e4736",
    );
  });

  void it("falls back to process[pid] outside Kubernetes and prints unknowns as '-'", () => {
    const line = formatEventLine(
      sampleEvent({
        namespace: null,
        pod: null,
        container: null,
        cause: "connection_closed_unanswered",
        errno: null,
        noticed: "unknown",
        correlation: "none",
        trace_id: null,
        span_id: null,
        reconcile: null,
        request: null,
      }),
      false,
    );
    assert.equal(line, "2026-12-02T15:04:05.123456Z  connection_closed_unanswered  manager[4242]  -  -  noticed=?  trace=-");
  });

  void it("shows the HTTP status of a rejected write, noticed losses, cluster-scoped objects and ambiguity", () => {
    const line = formatEventLine(
      sampleEvent({
        cause: "http_rejected",
        errno: null,
        noticed: "yes",
        correlation: "ambiguous",
        trace_id: null,
        span_id: null,
        reconcile: { controller: "node-labeler", namespace: null, name: "node-1", kind: "Node" },
        request: { method: "PUT", path: "/api/v1/nodes/node-1/status", status_code: 409 },
        candidates: [
          { trace_id: "a".repeat(32), span_id: "b".repeat(16), reconcile: null, request: null },
          { trace_id: "c".repeat(32), span_id: "d".repeat(16), reconcile: null, request: null },
        ],
      }),
      false,
    );
    assert.equal(
      line,
      "2026-12-02T15:04:05.123456Z  http_rejected                 ops/widget-operator-7d9  HTTP 409  node-labeler Node node-1  noticed  ambiguous(2)",
    );
  });

  void it("colours the cause and makes silent losses stand out only when asked", () => {
    const coloured = formatEventLine(sampleEvent(), true);
    assert.ok(coloured.includes("\u001b[31mwrite_failed"), "write_failed in red");
    assert.match(coloured, /\u001b\[7m.*SILENT/, "SILENT inverse");
    assert.ok(!formatEventLine(sampleEvent(), false).includes("\u001b["), "no escapes without colour");
    assert.notEqual(formatEventLine(sampleEvent({ cause: "connect_failed" }), true).indexOf("\u001b[35m"), -1, "connect_failed in magenta");
  });
});

void describe("shouldColor and feedUrl", () => {
  void it("colours a TTY unless NO_COLOR is set", () => {
    const tty = Object.assign(new PassThrough(), { isTTY: true });
    assert.equal(shouldColor(tty, {}), true);
    assert.equal(shouldColor(tty, { NO_COLOR: "1" }), false);
    assert.equal(shouldColor(tty, { NO_COLOR: "" }), true);
    assert.equal(shouldColor(new PassThrough(), {}), false);
  });

  void it("turns what a user types into the feed URL", () => {
    assert.equal(feedUrl("127.0.0.1:9470"), "ws://127.0.0.1:9470/events");
    assert.equal(feedUrl("http://127.0.0.1:9470"), "ws://127.0.0.1:9470/events");
    assert.equal(feedUrl("https://agent.example:9470/"), "wss://agent.example:9470/events");
    assert.equal(feedUrl("ws://[::1]:9470/events"), "ws://[::1]:9470/events");
    assert.throws(() => feedUrl("ftp://x"), /ftp:\/\/x/);
  });
});

interface Agent {
  server: Server;
  feed: EventFeed;
  port: number;
  stop(): Promise<void>;
}

async function startAgent(port = 0): Promise<Agent> {
  const server = createServer();
  server.listen(port, "127.0.0.1");
  await once(server, "listening");
  const feed = attachEventFeed(server, { replayCapacity: 100, maxBufferedBytes: 1 << 20, metrics: new AgentMetrics() });
  return {
    server,
    feed,
    port: (server.address() as AddressInfo).port,
    async stop() {
      await feed.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function collector() {
  const stream = new PassThrough();
  let text = "";
  stream.on("data", (c: Buffer) => (text += c.toString("utf8")));
  return { stream, text: () => text, lines: () => text.split("\n").filter(Boolean) };
}

async function until(condition: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

void describe("runTail", () => {
  void it("prints live events, survives an agent restart, and says so", async () => {
    let agent = await startAgent();
    const out = collector();
    const err = collector();
    const stop = new AbortController();
    const tailing = runTail(`127.0.0.1:${agent.port}`, {
      json: false,
      color: false,
      out: out.stream,
      err: err.stream,
      signal: stop.signal,
      backoff: { initialMs: 50, maxMs: 200 },
    });
    try {
      await until(() => err.text().includes("connected to"), "first connection");
      agent.feed.publish(sampleEvent({ pid: 1, pod: "first" }));
      await until(() => out.lines().length === 1, "first event");
      assert.match(out.lines()[0] ?? "", /ops\/first/);

      const { port } = agent;
      await agent.stop();
      await until(() => err.text().includes("reconnecting in"), "the reconnect notice");
      agent = await startAgent(port);
      await until(() => err.text().includes("reconnected to"), "reconnection");
      agent.feed.publish(sampleEvent({ pid: 2, pod: "second", time: "2026-12-02T15:04:06Z" }));
      await until(() => out.lines().length === 2, "event after restart");
      assert.match(out.lines()[1] ?? "", /ops\/second/);
      assert.match(err.text(), /lost connection to ws:\/\/127\.0\.0\.1:\d+\/events/);
    } finally {
      stop.abort();
      await tailing;
      await agent.stop();
    }
  });

  void it("replays from --since and prints raw lines with --json", async () => {
    const agent = await startAgent();
    const early = sampleEvent({ time: "2026-12-02T15:00:00Z", pid: 1 });
    const late = sampleEvent({ time: "2026-12-02T15:10:00Z", pid: 2 });
    agent.feed.publish(early);
    agent.feed.publish(late);
    const out = collector();
    const stop = new AbortController();
    const tailing = runTail(`http://127.0.0.1:${agent.port}`, {
      json: true,
      color: false,
      since: "2026-12-02T15:05:00Z",
      out: out.stream,
      err: new PassThrough(),
      signal: stop.signal,
    });
    try {
      await until(() => out.lines().length === 1, "replayed event");
      assert.deepEqual(out.lines(), [JSON.stringify(late)]);
    } finally {
      stop.abort();
      await tailing;
      await agent.stop();
    }
  });

  void it("after a dropped connection, replays what it missed without printing anything twice", async () => {
    const agent = await startAgent();
    const out = collector();
    const err = collector();
    const stop = new AbortController();
    const a = sampleEvent({ time: "2026-12-02T15:00:00Z", pid: 1 });
    const b = sampleEvent({ time: "2026-12-02T15:00:01Z", pid: 2 });
    const missed = sampleEvent({ time: "2026-12-02T15:00:02Z", pid: 3 });
    const tailing = runTail(`127.0.0.1:${agent.port}`, {
      json: true,
      color: false,
      out: out.stream,
      err: err.stream,
      signal: stop.signal,
      backoff: { initialMs: 100, maxMs: 100 },
    });
    let feed = agent.feed;
    try {
      await until(() => err.text().includes("connected to"), "connection");
      feed.publish(a);
      feed.publish(b);
      await until(() => out.lines().length === 2, "two events");
      // The feed goes away and comes back on the same server (a slow-client
      // drop looks the same to tail); its replay ring holds a, b and the one missed.
      await feed.close();
      feed = attachEventFeed(agent.server, { replayCapacity: 100, maxBufferedBytes: 1 << 20, metrics: new AgentMetrics() });
      feed.publish(a);
      feed.publish(b);
      feed.publish(missed);
      await until(() => err.text().includes("reconnected to"), "reconnection");
      await until(() => out.lines().length >= 3, "the missed event");
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.deepEqual(out.lines(), [a, b, missed].map((e) => JSON.stringify(e)));
    } finally {
      stop.abort();
      await tailing;
      await feed.close();
      await agent.stop();
    }
  });

  void it("rejects a bad --since before connecting", async () => {
    await assert.rejects(
      runTail("127.0.0.1:1", { json: false, color: false, since: "last tuesday", out: new PassThrough() }),
      /--since "last tuesday" is not an RFC 3339 time/,
    );
  });

  void it("warns about messages that are not loss events and keeps going", async () => {
    const agent = await startAgent();
    const out = collector();
    const err = collector();
    const stop = new AbortController();
    const tailing = runTail(`127.0.0.1:${agent.port}`, { json: false, color: false, out: out.stream, err: err.stream, signal: stop.signal });
    try {
      await until(() => err.text().includes("connected to"), "connection");
      agent.feed.publish({ ...sampleEvent(), pid: "four" } as unknown as ReturnType<typeof sampleEvent>);
      agent.feed.publish(sampleEvent({ pid: 5, pod: null }));
      await until(() => out.lines().length === 1, "the good event");
      assert.match(out.lines()[0] ?? "", /manager\[5\]/);
      assert.match(err.text(), /skipped a message that is not a loss event: pid:/);
    } finally {
      stop.abort();
      await tailing;
      await agent.stop();
    }
  });
});
