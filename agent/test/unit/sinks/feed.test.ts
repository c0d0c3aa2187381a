// The /events feed on a real HTTP server and real WebSocket clients on loopback.
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { afterEach, beforeEach, describe, it } from "node:test";
import { WebSocket } from "ws";
import { attachEventFeed, type EventFeed, type EventFeedOptions } from "../../../src/sinks/feed.ts";
import { AgentMetrics } from "../../../src/telemetry/metrics.ts";
import { sampleEvent } from "./sampleEvent.ts";

let server: Server;
let metrics: AgentMetrics;
let feed: EventFeed | undefined;
const openClients: WebSocket[] = [];

beforeEach(async () => {
  metrics = new AgentMetrics();
  server = createServer((_req, res) => res.end("metrics here"));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
});

afterEach(async () => {
  for (const ws of openClients.splice(0)) ws.terminate();
  await feed?.close();
  feed = undefined;
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

function attach(opts: Partial<EventFeedOptions> = {}): EventFeed {
  feed = attachEventFeed(server, { replayCapacity: 100, maxBufferedBytes: 1 << 20, metrics, ...opts });
  return feed;
}

function url(query = "", path = "/events"): string {
  const { port } = server.address() as AddressInfo;
  return `ws://127.0.0.1:${port}${path}${query}`;
}

/** A client that collects every message and resolves `closed` with the close frame it got. */
function connect(address: string) {
  const ws = new WebSocket(address);
  openClients.push(ws);
  const messages: string[] = [];
  ws.on("message", (data: Buffer) => messages.push(data.toString("utf8")));
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.on("close", (code, reason) => resolve({ code, reason: reason.toString("utf8") })),
  );
  ws.on("error", () => {});
  return { ws, messages, closed, opened: once(ws, "open") };
}

async function until(condition: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

async function metricValue(name: string, labels: Record<string, string> = {}): Promise<number> {
  const metric = await metrics.registry.getSingleMetric(name)?.get();
  const sample = metric?.values.find((v) => Object.entries(labels).every(([k, want]) => v.labels[k] === want));
  return sample?.value ?? Number.NaN;
}

void describe("event feed", () => {
  void it("sends each published event as one JSON text message, in the event schema", async () => {
    const f = attach();
    const client = connect(url());
    await client.opened;
    assert.equal(await metricValue("lostwrite_feed_clients"), 1);

    const first = sampleEvent();
    const second = sampleEvent({ time: "2026-12-02T15:04:06Z", cause: "connection_reset", errno: "ECONNRESET" });
    f.publish(first);
    f.publish(second);
    await until(() => client.messages.length === 2, "two messages");

    assert.deepEqual(client.messages.map((m) => JSON.parse(m) as unknown), [first, second]);
    assert.equal(client.messages[0], JSON.stringify(first));
  });

  void it("replays events with time >= since, in publish order, then goes live", async () => {
    const f = attach({ replayCapacity: 3 });
    // Four events into a ring of three: the oldest is gone.
    f.publish(sampleEvent({ time: "2026-12-02T15:00:00Z", pid: 1 }));
    f.publish(sampleEvent({ time: "2026-12-02T15:00:01.000001Z", pid: 2 }));
    f.publish(sampleEvent({ time: "2026-12-02T15:00:00.5Z", pid: 3 }));
    f.publish(sampleEvent({ time: "2026-12-02T15:00:02Z", pid: 4 }));

    // since with microseconds and an offset: 15:00:01.000001Z exactly, so pid 2 is included.
    const client = connect(url(`?since=${encodeURIComponent("2026-12-02T16:00:01.000001+01:00")}`));
    await client.opened;
    await until(() => client.messages.length === 2, "replay");
    f.publish(sampleEvent({ time: "2026-12-02T14:00:00Z", pid: 5 }));
    await until(() => client.messages.length === 3, "live event");

    const pids = client.messages.map((m) => (JSON.parse(m) as { pid: number }).pid);
    assert.deepEqual(pids, [2, 4, 5], "replay filters by time, keeps publish order; live events are not filtered");
  });

  void it("sends no replay without since", async () => {
    const f = attach();
    f.publish(sampleEvent({ pid: 1 }));
    const client = connect(url());
    await client.opened;
    f.publish(sampleEvent({ pid: 2 }));
    await until(() => client.messages.length === 1, "live event");
    assert.equal((JSON.parse(client.messages[0] ?? "") as { pid: number }).pid, 2);
  });

  void it("closes a client with a bad since value, naming the parameter and the value", async () => {
    attach();
    const client = connect(url("?since=yesterday"));
    const { code, reason } = await client.closed;
    assert.equal(code, 1008);
    assert.match(reason, /since="yesterday"/);
    assert.match(reason, /RFC 3339/);
  });

  void it("keeps close reasons within the protocol limit for long bad values", async () => {
    attach();
    const client = connect(url(`?since=${"x".repeat(500)}`));
    const { code, reason } = await client.closed;
    assert.equal(code, 1008);
    assert.ok(Buffer.byteLength(reason) <= 123, `reason is ${Buffer.byteLength(reason)} bytes`);
    assert.match(reason, /^bad query parameter since=/);
  });

  void it("drops a client that stops reading, keeps memory bounded, and keeps serving the others", async () => {
    const limit = 256 * 1024;
    const f = attach({ maxBufferedBytes: limit, closeGraceMs: 10_000 });
    const slow = connect(url());
    const fast = connect(url());
    await Promise.all([slow.opened, fast.opened]);
    const slowSocket = (slow.ws as unknown as { _socket: Socket })._socket;
    slowSocket.pause();

    // 64 KiB events: far more than the kernel's loopback buffers can absorb.
    const padding = "p".repeat(64 * 1024);
    const events = 600;
    let maxQueued = 0;
    for (let i = 0; i < events; i++) {
      f.publish(sampleEvent({ pid: i, process: padding }));
      maxQueued = Math.max(maxQueued, f.bufferedBytes());
      // Let the fast client drain, as a real event rate would.
      if (i % 16 === 0) await new Promise((resolve) => setImmediate(resolve));
    }

    assert.ok(maxQueued <= 2 * limit, `queued ${maxQueued} bytes, limit is ${limit} per client`);
    assert.equal(await metricValue("lostwrite_events_dropped_total", { stage: "feed", reason: "slow_client" }), 1);
    assert.equal(await metricValue("lostwrite_feed_clients"), 1);

    await until(() => fast.messages.length === events, "the fast client gets every event", 20_000);
    assert.equal((JSON.parse(fast.messages.at(-1) ?? "") as { pid: number }).pid, events - 1);

    // Once it reads again, the slow client learns why it was dropped.
    slowSocket.resume();
    const { code, reason } = await slow.closed;
    assert.equal(code, 1013);
    assert.match(reason, /slow client/);
    assert.ok(slow.messages.length < events, "the slow client did not get everything");
  });

  void it("refuses clients past the limit with a reason", async () => {
    attach({ maxClients: 1 });
    const first = connect(url());
    await first.opened;
    const second = connect(url());
    const { code, reason } = await second.closed;
    assert.equal(code, 1013);
    assert.match(reason, /too many clients/);
  });

  void it("leaves other paths alone and answers 404 when it is the only upgrade handler", async () => {
    attach();
    const client = new WebSocket(url("", "/metrics"));
    openClients.push(client);
    const [err] = (await once(client, "error")) as [Error];
    assert.match(err.message, /404/);
  });

  void it("closes clients with 1001 on shutdown and resets the client gauge", async () => {
    const f = attach();
    const client = connect(url());
    await client.opened;
    await f.close();
    feed = undefined;
    const { code } = await client.closed;
    assert.equal(code, 1001);
    assert.equal(await metricValue("lostwrite_feed_clients"), 0);
  });
});
