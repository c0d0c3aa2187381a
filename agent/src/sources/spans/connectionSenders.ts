// Who is at the other end of each OTLP connection, looked up once per
// connection: exporters keep their connection alive, so the /proc reads of
// socketOwner.ts are paid when one opens, not per request. Both transports
// tell this registry about every connection they accept and forget it when
// it closes; a request then asks by its peer's address and port, which name
// exactly one open connection at a time.
//
// Bounded: at most `capacity` connections are remembered; past it the oldest
// is forgotten (counted as a drop): its spans are unproven until it
// reconnects. A
// holder not found is looked for again after `retryMs`: a process that
// became a target since may be found then.
import { BoundedMap } from "../../boundedMap.ts";
import type { Socket } from "node:net";
import { canonicalAddress } from "../../ipAddress.ts";
import type { AgentMetrics } from "../../telemetry/metrics.ts";
import type { AcceptedConnection } from "./procNetTcp.ts";
import type { SocketOwner } from "./socketOwner.ts";

interface ConnectionSendersOptions {
  lookup: (connection: AcceptedConnection) => Promise<SocketOwner | null>;
  metrics: AgentMetrics;
  /** Connections remembered (default 1024). */
  capacity?: number;
  /** How long "no holder found" stands before it is looked up again (default 5 s). */
  retryMs?: number;
  /** Wall-clock ms; injectable for tests. */
  now?: () => number;
}

interface Entry {
  connection: AcceptedConnection;
  owner: Promise<SocketOwner | null> | null;
  lookedUpMs: number;
  settled: boolean;
}

export class ConnectionSenders {
  readonly #opts: Required<ConnectionSendersOptions>;
  /** By peer key, oldest remembered first; past capacity the oldest is forgotten, counted. */
  readonly #entries: BoundedMap<string, Entry>;

  constructor(opts: ConnectionSendersOptions) {
    this.#opts = { capacity: 1024, retryMs: 5000, now: Date.now, ...opts };
    if (!(this.#opts.capacity >= 1)) throw new RangeError(`connection senders capacity must be >= 1, got ${this.#opts.capacity}`);
    this.#entries = new BoundedMap(this.#opts.capacity, () => this.#opts.metrics.eventsDropped.inc({ stage: "otlp_senders", reason: "capacity" }));
    this.#opts.metrics.spanSenderConnections.set(0);
    this.#opts.metrics.eventsDropped.inc({ stage: "otlp_senders", reason: "capacity" }, 0);
  }

  get size(): number {
    return this.#entries.size;
  }

  /** A transport accepted `socket`: remembered until it closes. */
  track(socket: Socket): void {
    const connection = acceptedConnection(socket);
    if (connection === null) return;
    const key = peerKey(connection.client.address, connection.client.port);
    const entry: Entry = { connection, owner: null, lookedUpMs: 0, settled: false };
    this.#remember(key, entry);
    socket.once("close", () => {
      // The same address and port may already be a newer connection's.
      if (this.#entries.get(key) === entry) this.#entries.delete(key);
      this.#opts.metrics.spanSenderConnections.set(this.#entries.size);
    });
  }

  /** Who holds the client end of the open connection from `address`:`port`; null when it is not known or not found. */
  ownerOf(address: string | null, port: number | null): Promise<SocketOwner | null> {
    if (address === null || port === null) return Promise.resolve(null);
    const entry = this.#entries.get(peerKey(address, port));
    if (entry === undefined) return Promise.resolve(null);
    const now = this.#opts.now();
    if (entry.owner === null || (!entry.settled && now - entry.lookedUpMs >= this.#opts.retryMs)) {
      entry.lookedUpMs = now;
      const owner = this.#opts.lookup(entry.connection).catch(() => null);
      entry.owner = owner;
      // A holder found stands for the connection's life; only "not found" is asked again.
      void owner.then((found) => {
        if (found !== null && found.pids.length > 0 && entry.owner === owner) entry.settled = true;
      });
    }
    return entry.owner;
  }

  #remember(key: string, entry: Entry): void {
    this.#entries.set(key, entry);
    this.#opts.metrics.spanSenderConnections.set(this.#entries.size);
  }
}

function acceptedConnection(socket: Socket): AcceptedConnection | null {
  const { remoteAddress, remotePort, localAddress, localPort } = socket;
  if (remoteAddress === undefined || remotePort === undefined || localAddress === undefined || localPort === undefined) return null;
  return { client: { address: remoteAddress, port: remotePort }, server: { address: localAddress, port: localPort } };
}

function peerKey(address: string, port: number): string {
  return `${canonicalAddress(address) ?? address}|${port}`;
}
