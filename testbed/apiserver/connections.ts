// The apiserver's listening socket and every accepted connection, owned here
// rather than by node:tls so faults can act on the real TCP socket:
//
//   client ──TCP── raw net.Socket ──pipe── duplex pair ── TLSSocket ── http2/https server
//
// Because the raw socket is a plain TCP handle, `resetAndDestroy()` sends a
// real RST, `end()` a real FIN, and `pause()` really stops reading so the
// client's send buffer fills. TLS and ALPN (h2, http/1.1) happen on top of the
// duplex pair, and the TLS socket is handed to the HTTP/2 server exactly as
// node:tls would hand it over ('secureConnection').
//
// HTTP/2 multiplexes every stream of a client on one TCP connection, so a
// connection-level fault (reset, close, stall) hits every request in flight on
// that connection, as it would with a real apiserver.
import net from "node:net";
import { duplexPair } from "node:stream";
import tls from "node:tls";

export type Protocol = "h2" | "http/1.1";

export interface ConnectionInfo {
  id: number;
  /** The client's address as "addr:port" ("[v6]:port"). */
  client: string;
  /** The address the client connected to. */
  server: string;
  protocol: Protocol | null;
  openedAt: string;
  stalled: boolean;
}

function formatAddress(address: string | undefined, port: number | undefined): string {
  if (address === undefined || port === undefined) return "unknown";
  return address.includes(":") ? `[${address}]:${port}` : `${address}:${port}`;
}

const kConnection = Symbol("testbed.connection");

/** One accepted client connection and the faults that can be done to it. */
export class Connection {
  readonly id: number;
  readonly client: string;
  readonly server: string;
  readonly openedAt = new Date().toISOString();
  private readonly raw: net.Socket;
  private readonly outer: ReturnType<typeof duplexPair>[0];
  readonly tlsSocket: tls.TLSSocket;
  private stalledFlag = false;
  private finished = false;

  constructor(id: number, raw: net.Socket, secureContext: tls.SecureContext) {
    this.id = id;
    this.raw = raw;
    this.client = formatAddress(raw.remoteAddress, raw.remotePort);
    this.server = formatAddress(raw.localAddress, raw.localPort);
    const [outer, inner] = duplexPair();
    this.outer = outer;
    raw.pipe(outer);
    outer.pipe(raw);
    this.tlsSocket = new tls.TLSSocket(inner, { isServer: true, secureContext, ALPNProtocols: ["h2", "http/1.1"] });
    (this.tlsSocket as unknown as Record<symbol, Connection>)[kConnection] = this;
    // Errors on any layer end the connection; they are the client's doing or ours, never a crash.
    const end = (): void => this.destroyAll();
    for (const stream of [raw, outer, inner, this.tlsSocket]) stream.on("error", end);
    raw.on("close", end);
    // The HTTP layer closed the connection (keep-alive timeout, GOAWAY): end TCP gracefully.
    outer.on("close", () => {
      if (this.finished) return;
      raw.end();
      setTimeout(() => raw.destroy(), 5_000).unref();
    });
  }

  get protocol(): Protocol | null {
    const alpn = this.tlsSocket.alpnProtocol;
    return alpn === "h2" ? "h2" : alpn === "http/1.1" || alpn === false ? "http/1.1" : null;
  }

  get closed(): boolean {
    return this.finished || this.raw.destroyed;
  }

  info(): ConnectionInfo {
    return { id: this.id, client: this.client, server: this.server, protocol: this.protocol, openedAt: this.openedAt, stalled: this.stalledFlag };
  }

  /**
   * Abortive close: the kernel sends RST, the client's next read or write fails with ECONNRESET/EPIPE.
   * A connection whose FIN is still being sent (end() called, shutdown not done yet) is only
   * destroyed: libuv refuses a reset during a shutdown (EINVAL), and Node then never closes
   * the socket's handle, so the process could not exit.
   */
  reset(): void {
    if (this.closed) return;
    this.detach();
    if (this.raw.writableEnded && !this.raw.writableFinished) this.raw.destroy();
    else this.raw.resetAndDestroy();
    this.destroyAll();
  }

  /**
   * Orderly close without an answer: FIN to the client, nothing else is ever
   * sent. Incoming bytes are read and discarded so the kernel does not turn
   * the close into a RST; the socket goes once the client closes its side.
   */
  closeUnanswered(): void {
    if (this.closed) return;
    this.detach();
    this.raw.on("data", () => undefined);
    this.raw.resume();
    this.raw.end();
    setTimeout(() => this.raw.destroy(), 10_000).unref();
    this.destroyAll();
  }

  /** Stops reading from the socket: the kernel's receive buffer, then the client's send buffer, fill up. */
  stall(): void {
    if (this.closed || this.stalledFlag) return;
    this.stalledFlag = true;
    this.raw.unpipe(this.outer);
    this.raw.pause();
  }

  resume(): void {
    if (this.closed || !this.stalledFlag) return;
    this.stalledFlag = false;
    this.raw.pipe(this.outer);
  }

  get stalled(): boolean {
    return this.stalledFlag;
  }

  /** Tears down the TLS and HTTP layers above the raw socket, silently. */
  private destroyAll(): void {
    if (this.finished) return;
    this.finished = true;
    this.tlsSocket.destroy();
    this.outer.destroy();
    if (!this.raw.destroyed && !this.raw.writableEnded) this.raw.destroy();
  }

  private detach(): void {
    this.raw.unpipe(this.outer);
    this.outer.unpipe(this.raw);
    this.finished = true;
    this.tlsSocket.destroy();
    this.outer.destroy();
  }
}

/** The connection a request arrived on, from the TLS socket (HTTP/1.1) or the HTTP/2 session's socket proxy. */
export function connectionOf(socket: unknown): Connection | undefined {
  try {
    return (socket as Record<symbol, Connection | undefined> | undefined)?.[kConnection];
  } catch {
    // The HTTP/2 socket proxy throws once its session is gone.
    return undefined;
  }
}

export type ExistingConnections = "keep" | "close" | "reset";

export interface ListenerOptions {
  host: string;
  port: number;
  secureContext: tls.SecureContext;
  /** Called with each TLS socket once the handshake is done. */
  onSecureConnection: (socket: tls.TLSSocket) => void;
  maxConnections?: number;
}

/**
 * The listening socket. `refuse()` closes it for a while, so connects get
 * ECONNREFUSED from the kernel (nothing listens), then listens again on the
 * same address.
 */
export class Listener {
  private server: net.Server | undefined;
  private readonly opts: ListenerOptions;
  private readonly live = new Map<number, Connection>();
  private nextId = 1;
  private boundPort: number;
  private refuseTimer: NodeJS.Timeout | undefined;
  private refusedUntil: number | null = null;
  private closing = false;
  /** Connections turned away because `maxConnections` was reached. */
  rejected = 0;

  constructor(opts: ListenerOptions) {
    this.opts = opts;
    this.boundPort = opts.port;
  }

  get port(): number {
    return this.boundPort;
  }

  get refusing(): boolean {
    return this.refusedUntil !== null;
  }

  connections(): Connection[] {
    return [...this.live.values()].filter((conn) => !conn.closed);
  }

  async listen(): Promise<void> {
    const server = net.createServer({ noDelay: true }, (raw) => this.accept(raw));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen({ host: this.opts.host, port: this.boundPort, exclusive: true }, () => {
        server.off("error", reject);
        resolve();
      });
    });
    server.on("error", () => undefined);
    const address = server.address();
    if (address && typeof address === "object") this.boundPort = address.port;
    this.server = server;
  }

  /** Stops accepting for `forMs`, doing `existing` to the open connections; returns how many were closed. */
  refuse(forMs: number, existing: ExistingConnections): number {
    clearTimeout(this.refuseTimer);
    const server = this.server;
    this.server = undefined;
    this.refusedUntil = Date.now() + forMs;
    // close() stops listening at once; its callback waits for every connection, which we do not.
    server?.close();
    let closed = 0;
    if (existing !== "keep") {
      for (const conn of this.connections()) {
        if (existing === "reset") conn.reset();
        else conn.closeUnanswered();
        closed += 1;
      }
    }
    this.refuseTimer = setTimeout(() => {
      this.refusedUntil = null;
      if (!this.closing) this.listen().catch((error: unknown) => console.error(`testbed apiserver: cannot listen again on port ${this.boundPort}:`, error));
    }, forMs);
    return closed;
  }

  async close(): Promise<void> {
    this.closing = true;
    clearTimeout(this.refuseTimer);
    const server = this.server;
    this.server = undefined;
    for (const conn of this.connections()) conn.reset();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private accept(raw: net.Socket): void {
    if (this.live.size >= (this.opts.maxConnections ?? 1024)) {
      this.rejected += 1;
      raw.destroy();
      return;
    }
    const conn = new Connection(this.nextId++, raw, this.opts.secureContext);
    this.live.set(conn.id, conn);
    raw.on("close", () => this.live.delete(conn.id));
    conn.tlsSocket.once("secure", () => {
      // node:tls clears this flag right before it emits 'secureConnection'
      // (onServerSocketSecure); the HTTP/2 session waits for it to be false.
      (conn.tlsSocket as tls.TLSSocket & { secureConnecting: boolean }).secureConnecting = false;
      this.opts.onSecureConnection(conn.tlsSocket);
    });
  }
}
