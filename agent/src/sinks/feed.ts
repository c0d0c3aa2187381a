// The live loss-event feed: a WebSocket endpoint on the agent's existing HTTP
// server (the metrics server), one JSON text message per loss event.
//
// Memory is bounded by construction: each client may have at most
// `maxBufferedBytes` queued; a client that cannot keep up is closed (1013, "slow
// client") rather than buffered for. The replay ring behind `?since=` holds at
// most `replayCapacity` events, and the number of clients is capped.
import type { IncomingMessage, Server } from "node:http";
import type { Duplex } from "node:stream";
import { WebSocket, WebSocketServer } from "ws";
import type { LossEvent } from "../model.ts";
import type { AgentMetrics } from "../telemetry/metrics.ts";
import { parseRfc3339Ns } from "./rfc3339.ts";

/** Close codes a client sees. 1013 (Try Again Later) and 1008 (Policy Violation) are RFC 6455 codes. */
const FEED_CLOSE = {
  shuttingDown: 1001,
  badRequest: 1008,
  slowClient: 1013,
  tooManyClients: 1013,
} as const;

export interface EventFeedOptions {
  /** URL path to serve. Default "/events". */
  path?: string;
  /** Recent events kept for `?since=` replay. */
  replayCapacity: number;
  /** Bytes a client may have queued before it is closed as slow. */
  maxBufferedBytes: number;
  metrics: AgentMetrics;
  /** Concurrent clients. Default 64. */
  maxClients?: number;
  /** How long a closed slow client gets to read its close frame before the socket is destroyed. Default 2 s. */
  closeGraceMs?: number;
  /** Ping period; a client that misses a pong is dropped. Default 30 s; 0 disables. */
  pingIntervalMs?: number;
}

export interface EventFeed {
  publish(event: LossEvent): void;
  /** Bytes queued for all clients now; never more than clients × maxBufferedBytes. */
  bufferedBytes(): number;
  close(): Promise<void>;
}

interface ReplayEntry {
  timeNs: bigint | null;
  text: string;
}

interface Client {
  ws: WebSocket;
  alive: boolean;
}

// WebSocket close reasons are limited to 123 bytes.
const MAX_REASON_BYTES = 123;

export function attachEventFeed(server: Server, opts: EventFeedOptions): EventFeed {
  const path = opts.path ?? "/events";
  const maxClients = opts.maxClients ?? 64;
  const closeGraceMs = opts.closeGraceMs ?? 2000;
  const pingIntervalMs = opts.pingIntervalMs ?? 30_000;
  const { metrics, maxBufferedBytes } = opts;

  // Clients never need to send anything; a small maxPayload keeps them from trying.
  const wss = new WebSocketServer({ noServer: true, maxPayload: 4096, clientTracking: false });
  const clients = new Set<Client>();
  const replay = new ReplayRing(Math.max(0, opts.replayCapacity));
  const graceTimers = new Set<NodeJS.Timeout>();
  let closed = false;

  metrics.feedClients.set(0);
  metrics.eventsDropped.inc({ stage: "feed", reason: "slow_client" }, 0);

  function onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const url = new URL(req.url ?? "/", "http://feed.invalid");
    if (url.pathname !== path) {
      // Someone else may serve this path; answer only when nobody else listens.
      if (server.listenerCount("upgrade") === 1) socket.end("HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n");
      return;
    }
    if (closed) {
      socket.end("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\n");
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => accept(ws, url));
  }

  function accept(ws: WebSocket, url: URL): void {
    ws.on("error", () => {
      // A client's socket error only ends that client; "close" follows.
    });
    if (clients.size >= maxClients) {
      ws.close(FEED_CLOSE.tooManyClients, `too many clients (limit ${maxClients})`);
      return;
    }
    let sinceNs: bigint | null = null;
    const since = url.searchParams.get("since");
    if (since !== null) {
      sinceNs = parseRfc3339Ns(since);
      if (sinceNs === null) {
        ws.close(FEED_CLOSE.badRequest, closeReason(`bad query parameter since=${JSON.stringify(since)}: want an RFC 3339 time`));
        return;
      }
    }

    const client: Client = { ws, alive: true };
    ws.on("pong", () => {
      client.alive = true;
    });
    ws.on("close", () => {
      if (clients.delete(client)) metrics.feedClients.set(clients.size);
    });
    clients.add(client);
    metrics.feedClients.set(clients.size);

    // Replay and live events are sent from the same synchronous turn, so a
    // client sees the replay first and then every later event, in order.
    if (sinceNs !== null) {
      for (const entry of replay.entries()) {
        if (entry.timeNs === null || entry.timeNs < sinceNs) continue;
        if (!send(client, entry.text)) return;
      }
    }
  }

  /** Sends or drops the client; false when the client was dropped. */
  function send(client: Client, text: string): boolean {
    const { ws } = client;
    if (ws.readyState !== WebSocket.OPEN) return false;
    if (ws.bufferedAmount + Buffer.byteLength(text) > maxBufferedBytes) {
      dropSlowClient(client);
      return false;
    }
    ws.send(text);
    return true;
  }

  function dropSlowClient(client: Client): void {
    metrics.eventsDropped.inc({ stage: "feed", reason: "slow_client" });
    clients.delete(client);
    metrics.feedClients.set(clients.size);
    closeWithGrace(client.ws, FEED_CLOSE.slowClient, `slow client: more than ${maxBufferedBytes} bytes queued`);
  }

  // A slow client will not read its close frame soon; the socket is destroyed
  // after a grace period so the queued bytes are freed.
  function closeWithGrace(ws: WebSocket, code: number, reason: string): void {
    ws.close(code, closeReason(reason));
    const timer = setTimeout(() => {
      graceTimers.delete(timer);
      ws.terminate();
    }, closeGraceMs);
    timer.unref();
    graceTimers.add(timer);
    ws.once("close", () => {
      clearTimeout(timer);
      graceTimers.delete(timer);
    });
  }

  const pinger =
    pingIntervalMs > 0
      ? setInterval(() => {
          for (const client of clients) {
            if (!client.alive) {
              clients.delete(client);
              client.ws.terminate();
              continue;
            }
            client.alive = false;
            client.ws.ping();
          }
          metrics.feedClients.set(clients.size);
        }, pingIntervalMs)
      : null;
  pinger?.unref();

  server.on("upgrade", onUpgrade);

  return {
    publish(event) {
      if (closed) return;
      const text = JSON.stringify(event);
      replay.push({ timeNs: parseRfc3339Ns(event.time), text });
      for (const client of clients) send(client, text);
    },
    bufferedBytes() {
      let total = 0;
      for (const client of clients) total += client.ws.bufferedAmount;
      return total;
    },
    async close() {
      if (closed) return;
      closed = true;
      server.off("upgrade", onUpgrade);
      if (pinger !== null) clearInterval(pinger);
      const closing = [...clients].map(
        (client) =>
          new Promise<void>((resolve) => {
            if (client.ws.readyState === WebSocket.CLOSED) return resolve();
            client.ws.once("close", () => resolve());
            closeWithGrace(client.ws, FEED_CLOSE.shuttingDown, "agent shutting down");
          }),
      );
      clients.clear();
      metrics.feedClients.set(0);
      await Promise.all(closing);
      for (const timer of graceTimers) clearTimeout(timer);
      await new Promise<void>((resolve) => wss.close(() => resolve()));
    },
  };
}

function closeReason(reason: string): string {
  if (Buffer.byteLength(reason) <= MAX_REASON_BYTES) return reason;
  let cut = reason;
  while (Buffer.byteLength(cut) > MAX_REASON_BYTES - 3) cut = cut.slice(0, -1);
  return cut + "...";
}

/** Fixed-capacity ring of recent events, oldest first. */
class ReplayRing {
  private readonly slots: (ReplayEntry | undefined)[];
  private next = 0;
  private size = 0;
  private readonly capacity: number;

  constructor(capacity: number) {
    this.capacity = capacity;
    this.slots = new Array<ReplayEntry | undefined>(capacity);
  }

  push(entry: ReplayEntry): void {
    if (this.capacity === 0) return;
    this.slots[this.next] = entry;
    this.next = (this.next + 1) % this.capacity;
    this.size = Math.min(this.size + 1, this.capacity);
  }

  *entries(): Generator<ReplayEntry> {
    const start = (this.next - this.size + this.capacity) % this.capacity;
    for (let i = 0; i < this.size; i++) {
      const entry = this.slots[(start + i) % this.capacity];
      if (entry !== undefined) yield entry;
    }
  }
}
