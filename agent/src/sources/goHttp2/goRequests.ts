// Per-request verdicts for Go HTTP/2 clients, from the Go probe's lines
// alone. Every request is followed from the moment it got its stream until
// its fate is known:
//
//   response headers 2xx/3xx/4xx     answered: not lost (a status write's 2xx
//                                    is passed on: it turns an earlier
//                                    rejection of the same write into a retry)
//   response 409/422/429/5xx         a rejected status write: http_rejected,
//                                    which the correlator holds for its retry
//   RST_STREAM from the server       stream_reset; REFUSED_STREAM is retried
//                                    by Go itself: a retry, not a loss
//   GOAWAY                           streams above its last stream id were
//                                    never seen by the server and Go retries
//                                    them: retries
//   the connection's read loop ends  every stream without response headers
//                                    is lost: connection_reset (socket in
//                                    CLOSE) or connection_closed_unanswered
//   the client resets the stream     client_gave_up (its timeout or cancel),
//                                    unless a reset or the connection's end
//                                    explains it within abortGraceNs
//
// Only status writes (PUT or PATCH of …/status) to an apiserver become loss
// events. Any other request that dies with its connection — a watch, a read,
// a write of the object itself — is counted by the socket path as a
// connection loss, and never raises the silent-loss alert.
//
// The lines of one program come from per-CPU buffers, so two goroutines'
// lines can arrive out of order (a response's headers after the abort that
// followed them). Lines are therefore applied in kernel-time order, each
// once it is `holdNs` old. Socket-path losses of a process whose requests
// this path follows wait in the same order and are dropped (all but failed
// connects, which no request line describes): one lost request, one event.
//
// A request is mostly held in the kernel while it is in flight
// (go_http2.bt, IN FLIGHT), and a request answered 2xx that nothing waits
// for is never printed: its go_request line (PATH_NOW 3, with the time it
// went out) and path come right before the line that needs it (an answer
// that is no 2xx, or a 2xx a rejection may be waiting for; a reset, a
// GOAWAY, the connection's end, an abort). Such a request's peer is its
// process's (go_peer), and the kernel counts it (@go_sent, go_sent): it is
// counted from those, not from its line. Recordings of format 4 printed
// every request's line at once (PATH_NOW 0) and its path, if needed, before
// the line that ended it: those path pieces are kept by stream until their
// request is taken.
import { BoundedMap } from "../../boundedMap.ts";
import { isRejectedStatus } from "../../correlate/spanVerdict.ts";
import { formatHostPort, splitHostPort } from "../../hostPort.ts";
import type { ConnectionLossReason, LossCause, ProcessIdentity, SocketEvent } from "../../model.ts";
import { PROBE_FAMILIES, type PrintfRecordOf } from "../probe/probeLines.ts";
import { isStatusWrite } from "../spans/spanAttributes.ts";
import { PATH_PART_BYTES, PATH_PARTS } from "./goProbeProgram.ts";
import { TCP_STATE } from "../../vocabulary/tcpStates.ts";
import { HTTP2_ERROR_CODE } from "../../vocabulary/http2ErrorCodes.ts";

/** The kernel's counts of the requests it kept, per pid (the @go_sent map, printed at the tick when it changed). */
export type GoSentCounts = { type: "counters"; map: "goSent"; entries: { key: number[]; value: bigint }[] };

export type GoRecord =
  | PrintfRecordOf<"go_request">
  | PrintfRecordOf<"go_path">
  | PrintfRecordOf<"go_peer">
  | PrintfRecordOf<"go_sent">
  | GoSentCounts
  | PrintfRecordOf<"go_status">
  | PrintfRecordOf<"go_reset">
  | PrintfRecordOf<"go_goaway">
  | PrintfRecordOf<"go_conn_closed">
  | PrintfRecordOf<"go_abort">;

/**
 * The go_* kinds of the Go family's line table (its hello and tick are the
 * supervisor's; go_conn_sk is the socket probe's, through goProbes.ts).
 */
const GO_KINDS = new Set<string>(Object.keys(PROBE_FAMILIES.goHttp2).filter((kind) => kind.startsWith("go_") && kind !== "go_conn_sk"));

export function isGoRecord(record: { type: string; map?: string }): record is GoRecord {
  return GO_KINDS.has(record.type) || (record.type === "counters" && record.map === "goSent");
}

/** A request as the Go probe saw it written. */
interface GoRequest {
  pid: number;
  tid: number;
  conn: bigint;
  stream: bigint;
  streamId: number;
  method: string;
  /** The URL path; "…" marks bytes left out of a path too long to print whole. Empty while the kernel holds it (pathLen then says how long it is). */
  path: string;
  pathLen: number;
  /** The connection's peer, "host:port"; null when it could not be read. */
  peer: string | null;
  writtenNs: bigint;
}

/** Why Go sent a write again by itself, or the HTTP status a retried write had: lostwrite_status_write_retried_total's code. */
export type RetryCode = "goaway" | "refused_stream" | `${number}`;

export interface GoRequestsOptions {
  isApiserver: (host: string, port: number) => boolean;
  /** A lost write, in the socket event shape (with its request) the correlator takes. */
  onLoss: (event: SocketEvent) => void;
  /** A write Go sent again by itself (GOAWAY, REFUSED_STREAM): the failed try, in the socket event shape. */
  onRetry: (event: SocketEvent, code: RetryCode) => void;
  /** A status write answered 2xx: what resolves an earlier rejection of the same write as a retry. */
  onAnswered: (event: SocketEvent) => void;
  /** The requests of this pid are read from now on (true), or no longer (false). */
  /** `atNs`: since when the program follows the pid (attached), or when it stopped. */
  onAttached?: (pid: number, attached: boolean, atNs: bigint) => void;
  /** `count` requests to an apiserver were written by `pid`, of any method: the write count of a process this path follows. */
  onRequests?: (pid: number, count: number) => void;
  /**
   * A connection ended with requests unanswered, closed by the apiserver's
   * FIN or by the client: lostwrite_apiserver_connection_losses_total's
   * reason. A reset or a timeout is the socket path's to count (the kernel
   * knows the error); this path tells the clean closes, which bytes on the
   * socket cannot judge for a connection that carries watches.
   */
  onConnectionLoss?: (pid: number, reason: Extract<ConnectionLossReason, "closed_unanswered" | "closed_by_client">) => void;
  /** A socket-path loss this path does not speak for, in order: on to the correlator. */
  forward: (event: SocketEvent, identity: ProcessIdentity) => void;
  /** Something did not fit: the stage and reason of lostwrite_events_dropped_total. */
  onDrop: (reason: "capacity") => void;
  /** The program's in-flight map was full: a request came with its path at once, as before the map (nothing lost: its cost). */
  onKernelInflightFull?: () => void;
  /** How old a line must be before it is applied (default 50 ms). */
  holdNs?: bigint;
  /** How long after an abort a reset or connection end still explains it (default 100 ms). */
  abortGraceNs?: bigint;
  /** Requests followed at once, and lines waiting to be applied (default 65536 each). */
  capacity?: number;
}

type Queued = { ts: bigint } & (
  | { kind: "go"; record: QueuedGoRecord; request?: PrintedRequest }
  | { kind: "socket"; event: SocketEvent; identity: ProcessIdentity }
  | { kind: "detached"; pid: number; until: bigint }
);

/** A request as its go_request line printed it; `late`: from the kernel's in-flight map, which counted it. */
type PrintedRequest = GoRequest & { late: boolean };

/** The lines applied in kernel-time order: the rest (path pieces, peers, counts) are taken as they come. */
type QueuedGoRecord = Exclude<GoRecord, PrintfRecordOf<"go_path"> | PrintfRecordOf<"go_peer"> | PrintfRecordOf<"go_sent"> | GoSentCounts>;

interface Assembling {
  record: PrintfRecordOf<"go_request">;
  parts: PathPart[];
  expected: number;
}

interface PathPart {
  offset: number;
  text: string;
}

interface Conn {
  streams: Map<number, GoRequest>;
}

/** go_request's pathNow when the program's in-flight map could not take the request (go_http2.bt). */
const PATH_NOW_MAP_FULL = 2;

/** go_request's pathNow when the request was printed late from the kernel's in-flight map, which counted it; its peer is its process's go_peer. */
const PATH_NOW_LATE = 3;

/** How long past the hold and an abort's grace late path pieces of a request not followed are kept: well past the live clock's idle tick (1 s). */
const LATE_PATH_KEEP_NS = 10_000_000_000n;

/**
 * A clean close by TCP state when the read loop ended: the server's FIN came
 * first (CLOSE_WAIT, then LAST_ACK), or the client's (FIN_WAIT1, FIN_WAIT2,
 * CLOSING, TIME_WAIT). CLOSE is a reset or a timeout; 0 is no socket read.
 */
const CLEAN_CLOSE_BY_STATE = new Map<number, "closed_unanswered" | "closed_by_client">([
  [TCP_STATE.CLOSE_WAIT, "closed_unanswered"],
  [TCP_STATE.LAST_ACK, "closed_unanswered"],
  [TCP_STATE.FIN_WAIT1, "closed_by_client"],
  [TCP_STATE.FIN_WAIT2, "closed_by_client"],
  [TCP_STATE.CLOSING, "closed_by_client"],
  [TCP_STATE.TIME_WAIT, "closed_by_client"],
]);

export class GoRequests {
  readonly #o: Required<GoRequestsOptions>;
  readonly #queue: Queued[] = [];
  /** pid|stream → a request whose path parts are still coming; past capacity the oldest is dropped, counted. */
  readonly #assembling: BoundedMap<string, Assembling>;
  /**
   * pid|stream → the path pieces the kernel printed for a request it held,
   * until the request is taken; past capacity the oldest is dropped, counted.
   * Those of a request this path does not follow (no apiserver's) are let go
   * by age: `seenNs`, the first drain that saw them.
   */
  readonly #latePaths: BoundedMap<string, { parts: PathPart[]; seenNs: bigint | null }>;
  /** Aborted streams waiting for their verdict, in kernel-time order. */
  readonly #aborts: { conn: string; streamId: number; stream: bigint; atNs: bigint }[] = [];
  readonly #conns = new Map<string, Conn>();
  /**
   * Pids a Go program follows: since when, and until when once it stopped
   * (kernel ns; kept until the lines before then are applied). A socket-path
   * loss is this path's when its pid was followed at the time.
   */
  readonly #attached = new Map<number, { since: bigint; until: bigint | null }>();
  /**
   * pid → what the kernel counted of its requests (@go_sent): its process's
   * peer (go_peer), the count seen last and the part of it counted; past
   * capacity the oldest is dropped, counted.
   */
  readonly #kernelCounts: BoundedMap<number, { peer: string | null; seen: bigint; counted: bigint; exited: boolean }>;
  #followed = 0;
  #onQueued: () => void = () => {};

  constructor(opts: GoRequestsOptions) {
    this.#o = {
      holdNs: 50_000_000n,
      abortGraceNs: 100_000_000n,
      capacity: 65_536,
      onAttached: () => {},
      onRequests: () => {},
      onConnectionLoss: () => {},
      onKernelInflightFull: () => {},
      ...opts,
    };
    this.#assembling = new BoundedMap(this.#o.capacity, () => this.#o.onDrop("capacity"));
    this.#latePaths = new BoundedMap(this.#o.capacity, () => this.#o.onDrop("capacity"));
    this.#kernelCounts = new BoundedMap(this.#o.capacity, () => this.#o.onDrop("capacity"));
  }

  /**
   * The Go program of `pid` attached (true: it follows the pid since kernel
   * time `atNs`) or went away (false) at kernel time `atNs`. Gone, it leaves the requests it was following undecided:
   * their answers may come while no program reads them, so once the lines it
   * printed before `atNs` are applied, they are dropped, not judged by a
   * connection end seen later (which would make each a false loss).
   */
  setAttached(pid: number, attached: boolean, atNs?: bigint): void {
    const followed = this.#attached.get(pid);
    if (attached === (followed !== undefined && followed.until === null)) return;
    if (attached) {
      this.#attached.set(pid, { since: atNs ?? 0n, until: null });
      // A program that starts following the process (its first, a crashed
      // one's successor, a merge's, or one that let it go before and deleted
      // its entries) counts its requests from 0.
      const counts = this.#kernelCounts.get(pid);
      if (counts !== undefined) {
        counts.seen = 0n;
        counts.counted = 0n;
      }
    } else if (atNs !== undefined) {
      followed!.until = atNs;
      this.#enqueue({ ts: atNs, kind: "detached", pid, until: atNs });
    } else {
      this.#attached.delete(pid);
    }
    this.#o.onAttached(pid, attached, atNs ?? 0n);
  }

  /** The pids whose Go program is attached now. */
  attachedPids(): number[] {
    return [...this.#attached].filter(([, followed]) => followed.until === null).map(([pid]) => pid);
  }

  /**
   * The process is no target any more: its requests in flight are not
   * followed further. With `atNs`, as a program going away (see
   * setAttached): once the lines printed before then are applied, so that
   * replay, which sees the same detachment recorded, decides alike.
   */
  forget(pid: number, atNs?: bigint): void {
    this.setAttached(pid, false, atNs);
    if (atNs === undefined) this.#unfollow(pid);
  }

  #unfollow(pid: number): void {
    for (const [key, conn] of this.#conns) {
      if (!key.startsWith(`${pid}|`)) continue;
      for (const id of [...conn.streams.keys()]) this.#take(key, id);
      this.#conns.delete(key);
    }
    for (const key of this.#assembling.keys()) if (key.startsWith(`${pid}|`)) this.#assembling.delete(key);
    for (const key of this.#latePaths.keys()) if (key.startsWith(`${pid}|`)) this.#latePaths.delete(key);
  }

  /** A line of a Go program. */
  add(record: GoRecord): void {
    if (record.type === "go_peer") return this.#countKernel(record.pid, { peer: formatHostPort(record.addr, record.port) });
    if (record.type === "counters") {
      for (const { key, value } of record.entries) if (key.length === 1) this.#countKernel(key[0]!, { seen: value });
      return;
    }
    if (record.type === "go_sent") return this.#countKernel(record.pid, { seen: record.sent, exited: true });
    if (record.type === "go_request") {
      if (record.pathNow === PATH_NOW_MAP_FULL) this.#o.onKernelInflightFull();
      if (record.pathNow === 0) {
        // Its path stays in the kernel: followed without it.
        this.#enqueue({ ts: record.ts, kind: "go", record, request: requestOf({ record, parts: [], expected: 0 }) });
        return;
      }
      this.#assembling.set(`${record.pid}|${record.stream}`, { record, parts: [], expected: partsOf(record.pathLen) });
      return;
    }
    if (record.type === "go_path") {
      // Printed by the same probe run as the line it goes with (its go_request
      // after it, the answer or death before it): never reordered.
      const key = `${record.pid}|${record.stream}`;
      const assembling = this.#assembling.get(key);
      if (assembling === undefined) {
        // A path's first piece starts it afresh: pieces left by an earlier
        // stream at the same address (a request not followed) are not its.
        const late = this.#latePaths.get(key);
        if (late === undefined || record.offset === 0) this.#latePaths.set(key, { parts: [{ offset: record.offset, text: record.part }], seenNs: null });
        else late.parts.push({ offset: record.offset, text: record.part });
        return;
      }
      assembling.parts.push({ offset: record.offset, text: record.part });
      if (assembling.parts.length < assembling.expected) return;
      this.#assembling.delete(key);
      const request = requestOf(assembling);
      // Its peer now: the process's exit (go_sent), which may come before the request is applied, lets its peer go.
      if (request.late) request.peer = this.#kernelCounts.get(request.pid)?.peer ?? null;
      this.#enqueue({ ts: assembling.record.ts, kind: "go", record: assembling.record, request });
      return;
    }
    this.#enqueue({ ts: record.ts, kind: "go", record });
  }

  /**
   * A socket-path loss: taken, and decided in order with the Go lines, once
   * they have had the time to say whether a Go program followed its process
   * then (a process followed from its exec is announced by its first
   * request's line, which may come after the loss of a short-lived one).
   */
  offerSocketEvent(event: SocketEvent, identity: ProcessIdentity): boolean {
    this.#enqueue({ ts: event.kernelTimeNs, kind: "socket", event, identity });
    return true;
  }

  /** Applies every line at least holdNs old at kernel time `nowNs`. */
  drain(nowNs: bigint): void {
    const until = nowNs - this.#o.holdNs;
    let applied = 0;
    while (applied < this.#queue.length && this.#queue[applied]!.ts <= until) applied++;
    for (const entry of this.#queue.splice(0, applied)) this.#apply(entry);
    this.#judgeAborts(until - this.#o.abortGraceNs);
    this.#forgetLatePaths(nowNs);
  }

  /**
   * Late path pieces whose line has long been applied and judged: their
   * request was not followed (not to an apiserver). A piece is stamped by the
   * first drain after it came, whose time may be before it came: the live
   * clock steps through the ticks it slept over (a second at most, idle).
   */
  #forgetLatePaths(nowNs: bigint): void {
    const before = nowNs - this.#o.holdNs - this.#o.abortGraceNs - LATE_PATH_KEEP_NS;
    for (const [key, late] of this.#latePaths.entries()) {
      if (late.seenNs === null) late.seenNs = nowNs;
      else if (late.seenNs < before) this.#latePaths.delete(key);
    }
  }

  /** Applies everything waiting (shutdown). */
  flush(): void {
    for (const entry of this.#queue.splice(0)) this.#apply(entry);
    this.#judgeAborts(null);
  }

  /**
   * Streams the client aborted and nothing else ended since (no answer, no
   * reset, no connection end within abortGraceNs): the client gave up.
   */
  #judgeAborts(until: bigint | null): void {
    let judged = 0;
    while (judged < this.#aborts.length && (until === null || this.#aborts[judged]!.atNs <= until)) judged++;
    for (const abort of this.#aborts.splice(0, judged)) {
      const open = this.#conns.get(abort.conn)?.streams.get(abort.streamId);
      if (open === undefined || open.stream !== abort.stream) continue; // answered or ended otherwise meanwhile
      this.#lose(this.#take(abort.conn, abort.streamId)!, "client_gave_up", abort.atNs, null);
    }
  }

  /** Lines wait to be applied or aborts to be judged: drain() has work to do as time passes. */
  get busy(): boolean {
    return this.#queue.length > 0 || this.#aborts.length > 0;
  }

  /** `listener` is called whenever a line or socket loss is queued (the drain timer wakes on it). */
  onQueued(listener: () => void): void {
    this.#onQueued = listener;
  }

  /** Requests followed now (in flight) and lines waiting. */
  get size(): { requests: number; queued: number } {
    return { requests: this.#followed, queued: this.#queue.length };
  }

  #enqueue(queued: Queued): void {
    if (this.#queue.length >= this.#o.capacity) {
      // Apply the oldest now rather than lose it; its order may then be off.
      this.#o.onDrop("capacity");
      this.#apply(this.#queue.shift()!);
    }
    // Lines arrive nearly in order: insert from the end, after any of the same time.
    let i = this.#queue.length;
    while (i > 0 && this.#queue[i - 1]!.ts > queued.ts) i--;
    this.#queue.splice(i, 0, queued);
    this.#onQueued();
  }

  #apply(entry: Queued): void {
    if (entry.kind === "detached") {
      // Unless a program follows it again since.
      if (this.#attached.get(entry.pid)?.until === entry.until) this.#attached.delete(entry.pid);
      return this.#unfollow(entry.pid);
    }
    if (entry.kind === "socket") {
      if (!this.#speaksFor(entry.event)) this.#o.forward(entry.event, entry.identity);
      return;
    }
    const record = entry.record;
    switch (record.type) {
      case "go_request":
        if (entry.request !== undefined) this.#follow(entry.request);
        return;
      case "go_status":
        return this.#answered(record);
      case "go_reset": {
        const request = this.#take(connKey(record.pid, record.conn), record.streamId);
        if (request === undefined) return;
        if (record.code === HTTP2_ERROR_CODE.REFUSED_STREAM) this.#o.onRetry(eventOf(request, "stream_reset", record.ts, null), "refused_stream");
        else this.#lose(request, "stream_reset", record.ts, null);
        return;
      }
      case "go_goaway": {
        const conn = this.#conns.get(connKey(record.pid, record.conn));
        if (conn === undefined) return;
        for (const id of [...conn.streams.keys()]) {
          if (id <= record.lastStreamId) continue;
          const request = this.#take(connKey(record.pid, record.conn), id)!;
          this.#o.onRetry(eventOf(request, "connection_closed_unanswered", record.ts, null), "goaway");
        }
        return;
      }
      case "go_conn_closed": {
        const key = connKey(record.pid, record.conn);
        const conn = this.#conns.get(key);
        if (conn === undefined) return;
        const cause: LossCause = record.state === TCP_STATE.CLOSE ? "connection_reset" : "connection_closed_unanswered";
        const closedBy = CLEAN_CLOSE_BY_STATE.get(record.state);
        if (conn.streams.size > 0 && closedBy !== undefined) this.#o.onConnectionLoss(record.pid, closedBy);
        for (const id of [...conn.streams.keys()]) {
          const request = this.#take(key, id);
          if (request !== undefined) this.#lose(request, cause, record.ts, null);
        }
        this.#conns.delete(key);
        return;
      }
      case "go_abort": {
        // Not judged yet: a write into a reset connection resets the stream
        // too, a moment before the read loop sees the connection end. A
        // stream answered already (NO_ERROR after an early answer) is not
        // followed any more and is ignored.
        const conn = connKey(record.pid, record.conn);
        const open = this.#conns.get(conn)?.streams.get(record.streamId);
        if (open === undefined) return;
        if (this.#aborts.length >= this.#o.capacity) {
          this.#o.onDrop("capacity");
          this.#judgeAborts(this.#aborts[0]!.atNs); // the oldest is judged early
        }
        this.#aborts.push({ conn, streamId: record.streamId, stream: open.stream, atNs: record.ts });
        return;
      }
    }
  }

  #follow(printed: PrintedRequest): void {
    const { late, ...request } = printed;
    // Printed late, its peer is its process's (go_peer, taken when it came, else now), and the kernel counted it.
    if (late && request.peer === null) request.peer = this.#kernelCounts.get(request.pid)?.peer ?? null;
    // Without a peer there is no telling an apiserver from any other server.
    if (!this.#isApiserver(request.peer)) return;
    if (!late) this.#o.onRequests(request.pid, 1);
    if (this.#followed >= this.#o.capacity) {
      this.#o.onDrop("capacity");
      return;
    }
    const key = connKey(request.pid, request.conn);
    let conn = this.#conns.get(key);
    if (conn === undefined) {
      conn = { streams: new Map() };
      this.#conns.set(key, conn);
    }
    const replaced = conn.streams.get(request.streamId);
    if (replaced !== undefined) this.#take(key, request.streamId);
    conn.streams.set(request.streamId, request);
    this.#followed++;
  }

  #isApiserver(peer: string | null): boolean {
    const hostPort = peer === null ? null : splitHostPort(peer);
    return hostPort !== null && this.#o.isApiserver(hostPort.host, hostPort.port);
  }

  /**
   * What the kernel counted of `pid`'s requests: its peer, a cumulative count
   * (@go_sent, or go_sent when it exited). The growth is counted once the
   * peer is known (the lines come from per-CPU buffers, so a count may come
   * before it); an exited process's entry goes once counted.
   */
  #countKernel(pid: number, update: { peer?: string; seen?: bigint; exited?: boolean }): void {
    let entry = this.#kernelCounts.get(pid);
    if (entry === undefined) {
      entry = { peer: null, seen: 0n, counted: 0n, exited: false };
      this.#kernelCounts.set(pid, entry);
    }
    if (update.peer !== undefined) entry.peer = update.peer;
    if (update.exited === true) entry.exited = true;
    if (update.seen !== undefined) {
      // Cumulative, and read from the map as bpftrace prints it: it never goes
      // back within one program (a new one is reset in setAttached). Lower
      // all the same, it is a program's the agent was not told of: from 0.
      if (update.seen < entry.seen) entry.counted = 0n;
      entry.seen = update.seen;
    }
    if (entry.peer === null) return;
    if (entry.seen > entry.counted) {
      if (this.#isApiserver(entry.peer)) this.#o.onRequests(pid, Number(entry.seen - entry.counted));
      entry.counted = entry.seen;
    }
    if (entry.exited) this.#kernelCounts.delete(pid);
  }

  /** A request followed no more, with its path when the kernel held it and printed it since. */
  #take(conn: string, streamId: number): GoRequest | undefined {
    const streams = this.#conns.get(conn)?.streams;
    const request = streams?.get(streamId);
    if (request === undefined) return undefined;
    streams!.delete(streamId);
    this.#followed--;
    if (request.path !== "" || request.pathLen === 0) return request;
    const key = `${request.pid}|${request.stream}`;
    const late = this.#latePaths.get(key);
    if (late === undefined) return request;
    this.#latePaths.delete(key);
    return { ...request, path: pathOf(late.parts) };
  }

  #answered(record: PrintfRecordOf<"go_status">): void {
    const code = record.status;
    if (code >= 100 && code < 200) return; // informational: the answer is still to come
    const request = this.#take(connKey(record.pid, record.conn), record.streamId);
    if (request === undefined) return;
    if (!isStatusWrite(request.method, request.path)) return;
    if (code >= 200 && code < 300) this.#o.onAnswered(eventOf(request, "http_rejected", record.ts, code));
    else if (isRejectedStatus(code)) this.#lose(request, "http_rejected", record.ts, code);
  }

  #lose(request: GoRequest, cause: LossCause, atNs: bigint, statusCode: number | null): void {
    if (isStatusWrite(request.method, request.path)) this.#o.onLoss(eventOf(request, cause, atNs, statusCode));
  }

  /**
   * A socket-path loss of a process whose Go program is attached: its
   * apiserver connections are Go's HTTP/2 client's, whose every request this
   * path reads — a reset, a close or a failed write on one of them is either
   * a request this path reports or no request at all (a watch, a PING).
   * Only a failed connect precedes every request and is the socket path's;
   * and a request the socket path saw unanswered since before the program
   * followed the process (`since`): the program did not see it written.
   */
  #speaksFor(event: SocketEvent): boolean {
    const followed = this.#attached.get(event.pid);
    if (followed === undefined || event.cause === "connect_failed") return false;
    if (event.kernelTimeNs < followed.since || (followed.until !== null && event.kernelTimeNs > followed.until)) return false;
    const unansweredSinceNs = event.unansweredForMs === null ? null : event.kernelTimeNs - BigInt(Math.round(event.unansweredForMs * 1e6));
    return !((event.unansweredBytes ?? 0) > 0 && unansweredSinceNs !== null && unansweredSinceNs < followed.since);
  }
}

/** A request's failure in the shape the correlator takes: no syscall, the request instead. */
function eventOf(request: GoRequest, cause: LossCause, atNs: bigint, statusCode: number | null): SocketEvent {
  return {
    kernelTimeNs: atNs,
    pid: request.pid,
    tid: request.tid,
    process: "",
    syscall: null,
    ret: null,
    errno: null,
    bytes: null,
    apiserver: request.peer ?? "",
    cause,
    unansweredBytes: null,
    unansweredForMs: cause === "http_rejected" ? null : Number((atNs - request.writtenNs) / 1_000_000n),
    retransmits: null,
    request: { method: request.method, path: request.path, statusCode, streamId: request.streamId },
  };
}

function connKey(pid: number, conn: bigint): string {
  return `${pid}|${conn}`;
}

/** How many go_path lines print a path of `pathLen` bytes. */
function partsOf(pathLen: number): number {
  return pathLen <= PATH_PART_BYTES ? 1 : Math.min(PATH_PARTS, Math.ceil(pathLen / PATH_PART_BYTES));
}

/** The path from its printed pieces; "…" where bytes between them were left out. */
function pathOf(parts: PathPart[]): string {
  const sorted = parts.sort((a, b) => a.offset - b.offset);
  let path = "";
  for (const part of sorted) path += part.offset > path.length ? `…${part.text}` : part.text.slice(path.length - part.offset);
  return path;
}

function requestOf({ record, parts }: Assembling): PrintedRequest {
  return {
    late: record.pathNow === PATH_NOW_LATE,
    pid: record.pid,
    tid: record.tid,
    conn: record.conn,
    stream: record.stream,
    streamId: record.streamId,
    method: record.method,
    path: pathOf(parts),
    pathLen: record.pathLen,
    peer: record.port === 0 ? null : formatHostPort(record.addr, record.port),
    writtenNs: record.ts,
  };
}

