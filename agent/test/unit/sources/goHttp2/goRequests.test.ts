import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ProcessIdentity, SocketEvent } from "../../../../src/model.ts";
import { GoRequests, type GoRecord, type GoRequestsOptions, type RetryCode } from "../../../../src/sources/goHttp2/goRequests.ts";

const MS = 1_000_000n;
const PID = 4242;
const CONN = 0xc000182000n;
const STATUS_PATH = "/apis/demo.lostwrite.dev/v1/namespaces/default/widgets/w1/status";
const WATCH_PATH = "/apis/demo.lostwrite.dev/v1/namespaces/default/widgets";

function harness(opts: Partial<Pick<GoRequestsOptions, "capacity" | "onRequests" | "onConnectionLoss" | "onAttached" | "onKernelInflightFull">> = {}) {
  const losses: SocketEvent[] = [];
  const retries: { event: SocketEvent; code: RetryCode }[] = [];
  const forwarded: SocketEvent[] = [];
  const answered: SocketEvent[] = [];
  const drops: string[] = [];
  const go = new GoRequests({
    isApiserver: (host, port) => host === "10.96.0.1" && port === 443,
    onLoss: (event) => losses.push(event),
    onRetry: (event, code) => retries.push({ event, code }),
    forward: (event) => forwarded.push(event),
    onAnswered: (event) => answered.push(event),
    onDrop: (reason) => drops.push(reason),
    ...opts,
  });
  return { go, losses, retries, forwarded, answered, drops };
}

/** A request line and its path pieces, as the probe prints them. */
function request(ts: bigint, streamId: number, method: string, path: string, peer = { port: 443, addr: "10.96.0.1" }): GoRecord[] {
  const stream = 0xc0000f0000n + BigInt(streamId);
  const lines: GoRecord[] = [
    { type: "go_request", ts, pid: PID, tid: PID + 1, conn: CONN, stream, streamId, pathLen: path.length, pathNow: 1, method, ...peer },
  ];
  const offsets = path.length <= 120 ? [0] : path.length <= 240 ? [0, 120] : [0, 120, path.length > 360 ? path.length - 120 : 240];
  for (const offset of offsets) lines.push({ type: "go_path", pid: PID, stream, offset, part: path.slice(offset, offset + 120) });
  return lines;
}

/** A request the kernel holds in flight (go_http2.bt, IN FLIGHT): its line alone, its path printed later by late(). */
function held(ts: bigint, streamId: number, method: string, path: string, peer = { port: 443, addr: "10.96.0.1" }): GoRecord {
  return { type: "go_request", ts, pid: PID, tid: PID + 1, conn: CONN, stream: 0xc0000f0000n + BigInt(streamId), streamId, pathLen: path.length, pathNow: 0, method, ...peer };
}

/** A request the kernel kept, printed late (PATH_NOW 3) right before the line that needs it: its peer is its process's go_peer. */
function kept(ts: bigint, streamId: number, method: string, path: string): GoRecord[] {
  return request(ts, streamId, method, path, { port: 0, addr: "go_peer" }).map((line) => (line.type === "go_request" ? { ...line, pathNow: 3 } : line));
}

const peer = (pid: number, port: number, addr: string): GoRecord => ({ type: "go_peer", ts: 0n, pid, port, addr });

/** A held request's path pieces, as the probe prints them right before the line that needs them. */
function late(streamId: number, path: string): GoRecord[] {
  return request(0n, streamId, "", path).filter((line) => line.type === "go_path");
}

const headers = (ts: bigint, streamId: number, status: number): GoRecord => ({ type: "go_status", ts, pid: PID, conn: CONN, streamId, status });
const closed = (ts: bigint, state: number): GoRecord => ({ type: "go_conn_closed", ts, pid: PID, conn: CONN, state, port: 443, addr: "10.96.0.1" });
const abort = (ts: bigint, streamId: number): GoRecord => ({ type: "go_abort", ts, pid: PID, tid: PID, conn: CONN, streamId, code: 8 }); // CANCEL

const identity: ProcessIdentity = { pid: PID, tid: PID, process: "manager", namespace: "", pod: "", container: "", controller: "" };
function socketLoss(ts: bigint, cause: SocketEvent["cause"], apiserver = "10.96.0.1:443", unansweredForMs = 1): SocketEvent {
  return {
    kernelTimeNs: ts, pid: PID, tid: PID, process: "manager", syscall: null, ret: null, errno: null, bytes: null, apiserver, cause,
    unansweredBytes: 90, unansweredForMs, retransmits: 0,
  };
}

function feed(go: GoRequests, records: GoRecord[]): void {
  for (const record of records) go.add(record);
}

describe("Go HTTP/2 request verdicts", { timeout: 10_000 }, () => {
  it("a status write answered 2xx is no loss", () => {
    const { go, losses, retries } = harness();
    feed(go, [...request(1n * MS, 3, "PATCH", STATUS_PATH), headers(2n * MS, 3, 200), abort(3n * MS, 3)]);
    go.drain(1000n * MS);
    assert.deepEqual([losses, retries], [[], []]);
  });

  it("a reset connection loses the status write in flight, not the watch that streamed on it", () => {
    const { go, losses } = harness();
    feed(go, [
      ...request(1n * MS, 1, "GET", `${WATCH_PATH}?watch=1`),
      headers(2n * MS, 1, 200),
      ...request(10n * MS, 3, "PATCH", STATUS_PATH),
      closed(30n * MS, 7),
      abort(31n * MS, 1),
      abort(32n * MS, 3),
    ]);
    go.drain(1000n * MS);
    assert.equal(losses.length, 1);
    assert.deepEqual(
      { cause: losses[0]!.cause, request: losses[0]!.request, apiserver: losses[0]!.apiserver, waited: losses[0]!.unansweredForMs, tid: losses[0]!.tid },
      { cause: "connection_reset", request: { method: "PATCH", path: STATUS_PATH, statusCode: null, streamId: 3 }, apiserver: "10.96.0.1:443", waited: 20, tid: PID + 1 },
    );
  });

  it("tells a server's FIN (CLOSE_WAIT) from a reset", () => {
    const { go, losses } = harness();
    feed(go, [...request(1n * MS, 3, "PUT", STATUS_PATH), closed(5n * MS, 8)]);
    go.drain(1000n * MS);
    assert.deepEqual(losses.map((l) => l.cause), ["connection_closed_unanswered"]);
  });

  it("applies lines in kernel time: an abort printed before the headers that preceded it is no loss", () => {
    const { go, losses } = harness();
    feed(go, [...request(1n * MS, 3, "PATCH", STATUS_PATH), abort(3n * MS, 3), headers(2n * MS, 3, 200)]);
    go.drain(1000n * MS);
    assert.deepEqual(losses, []);
  });

  it("waits holdNs before applying a line, so a late line of another CPU still sorts in", () => {
    const { go, losses } = harness();
    feed(go, [...request(1n * MS, 3, "PATCH", STATUS_PATH), abort(30n * MS, 3)]);
    go.drain(40n * MS); // the abort is 10 ms old: not yet applied
    go.add(headers(20n * MS, 3, 200));
    go.drain(1000n * MS);
    assert.deepEqual(losses, []);
  });

  it("an abort before any answer is the client giving up", () => {
    const { go, losses } = harness();
    feed(go, [...request(1n * MS, 5, "PATCH", STATUS_PATH), abort(2001n * MS, 5)]);
    go.drain(3000n * MS);
    assert.deepEqual(losses.map((l) => [l.cause, l.unansweredForMs]), [["client_gave_up", 2000]]);
  });

  it("an abort right before the connection's end is the connection's loss: a write into a reset socket aborts first", () => {
    const { go, losses } = harness();
    feed(go, [...request(1n * MS, 5, "PATCH", STATUS_PATH), abort(20n * MS, 5), closed(25n * MS, 7)]);
    go.drain(3000n * MS);
    assert.deepEqual(losses.map((l) => l.cause), ["connection_reset"]);
  });

  it("RST_STREAM: REFUSED_STREAM is Go's own retry, any other code a stream_reset", () => {
    const { go, losses, retries } = harness();
    feed(go, [
      ...request(1n * MS, 3, "PATCH", STATUS_PATH),
      ...request(2n * MS, 5, "PATCH", STATUS_PATH),
      { type: "go_reset", ts: 3n * MS, pid: PID, conn: CONN, streamId: 3, code: 7 },
      { type: "go_reset", ts: 4n * MS, pid: PID, conn: CONN, streamId: 5, code: 2 },
    ]);
    go.drain(1000n * MS);
    assert.deepEqual(retries.map((r) => [r.event.request?.streamId, r.code]), [[3, "refused_stream"]]);
    assert.deepEqual(losses.map((l) => [l.request?.streamId, l.cause]), [[5, "stream_reset"]]);
  });

  it("GOAWAY: streams above the last stream id are retried; the others can still be lost", () => {
    const { go, losses, retries } = harness();
    feed(go, [
      ...request(1n * MS, 3, "PATCH", STATUS_PATH),
      ...request(2n * MS, 5, "PATCH", STATUS_PATH),
      { type: "go_goaway", ts: 3n * MS, pid: PID, conn: CONN, lastStreamId: 3, code: 0 },
      closed(4n * MS, 8),
    ]);
    go.drain(1000n * MS);
    assert.deepEqual(retries.map((r) => [r.event.request?.streamId, r.code]), [[5, "goaway"]]);
    assert.deepEqual(losses.map((l) => [l.request?.streamId, l.cause]), [[3, "connection_closed_unanswered"]]);
  });

  it("reports a refused status write at once, and passes on the 2xx of a later try that makes it a retry", () => {
    const { go, losses, answered, retries } = harness();
    feed(go, [
      ...request(1n * MS, 3, "PATCH", STATUS_PATH),
      headers(2n * MS, 3, 429),
      ...request(1003n * MS, 5, "PATCH", STATUS_PATH),
      headers(1004n * MS, 5, 200),
      ...request(1005n * MS, 7, "GET", WATCH_PATH),
      headers(1006n * MS, 7, 200),
    ]);
    go.drain(2000n * MS);
    assert.deepEqual(losses.map((l) => [l.cause, l.request]), [["http_rejected", { method: "PATCH", path: STATUS_PATH, statusCode: 429, streamId: 3 }]]);
    assert.deepEqual(answered.map((a) => [a.kernelTimeNs, a.request?.statusCode, a.request?.streamId]), [[1004n * MS, 200, 5]], "status writes' answers only");
    assert.deepEqual(retries, [], "the correlator decides whether the refusal was retried");
  });

  it("a request whose path the kernel held is reported with the path printed before its end: rejected, reset, GOAWAY, closed, given up", () => {
    const { go, losses, retries } = harness();
    const long = STATUS_PATH.replace("w1", "n".repeat(400));
    feed(go, [
      held(1n * MS, 3, "PATCH", STATUS_PATH),
      ...late(3, STATUS_PATH),
      headers(2n * MS, 3, 409),
      held(3n * MS, 5, "PUT", STATUS_PATH),
      ...late(5, STATUS_PATH),
      { type: "go_reset", ts: 4n * MS, pid: PID, conn: CONN, streamId: 5, code: 2 },
      held(5n * MS, 7, "PATCH", STATUS_PATH),
      held(6n * MS, 9, "PATCH", long),
      ...late(9, long),
      { type: "go_goaway", ts: 7n * MS, pid: PID, conn: CONN, lastStreamId: 7, code: 0 },
      held(8n * MS, 11, "PATCH", STATUS_PATH),
      ...late(11, STATUS_PATH),
      abort(9n * MS, 11),
    ]);
    go.drain(400n * MS); // past the abort's grace: the client gave up
    feed(go, [...late(7, STATUS_PATH), closed(500n * MS, 7)]);
    go.drain(2000n * MS);
    assert.deepEqual(losses.map((l) => [l.request?.streamId, l.cause, l.request?.path]), [
      [3, "http_rejected", STATUS_PATH],
      [5, "stream_reset", STATUS_PATH],
      [11, "client_gave_up", STATUS_PATH],
      [7, "connection_reset", STATUS_PATH],
    ]);
    assert.deepEqual(retries.map((r) => [r.event.request?.streamId, r.code]), [[9, "goaway"]]);
    const path = retries[0]!.event.request!.path;
    assert.ok(path.startsWith(long.slice(0, 240)) && path.endsWith(long.slice(-120)) && path.includes("…"), path);
  });

  it("keeps a late path for its abort's verdict when the clock steps through the ticks it slept over", () => {
    const { go, losses } = harness();
    feed(go, [held(0n, 3, "PATCH", STATUS_PATH)]);
    go.drain(1000n * MS); // idle: the live clock's next wake is a second later
    feed(go, [...late(3, STATUS_PATH), abort(1990n * MS, 3)]);
    for (let t = 1025n; t <= 2500n; t += 25n) go.drain(t * MS); // the ticks from the last wake on, as GraphClock.advance steps them
    assert.deepEqual(losses.map((l) => [l.cause, l.request?.path]), [["client_gave_up", STATUS_PATH]]);
  });

  it("a 2xx printed without its path is no status write's answer: nothing waited for it; with its path it is", () => {
    const { go, answered, losses } = harness();
    feed(go, [held(1n * MS, 3, "PATCH", STATUS_PATH), headers(2n * MS, 3, 200), held(3n * MS, 5, "PATCH", STATUS_PATH), ...late(5, STATUS_PATH), headers(4n * MS, 5, 200)]);
    go.drain(1000n * MS);
    assert.deepEqual(answered.map((a) => [a.request?.streamId, a.request?.path]), [[5, STATUS_PATH]]);
    assert.deepEqual([losses, go.size.requests], [[], 0]);
  });

  it("counts a request the kernel's full in-flight map could not take, and follows it with the path that came with it", () => {
    let full = 0;
    const { go, losses } = harness({ onKernelInflightFull: () => full++ });
    const lines = request(1n * MS, 3, "PATCH", STATUS_PATH);
    feed(go, [{ ...(lines[0] as Extract<GoRecord, { type: "go_request" }>), pathNow: 2 }, ...lines.slice(1), headers(2n * MS, 3, 500)]);
    go.drain(1000n * MS);
    assert.equal(full, 1);
    assert.deepEqual(losses.map((l) => [l.cause, l.request?.path]), [["http_rejected", STATUS_PATH]]);
  });

  it("lets go of the late path pieces of a request it does not follow, without counting a drop", () => {
    const { go, losses, drops } = harness({ capacity: 4 });
    for (let i = 0; i < 8; i++) {
      const t = BigInt(i) * 20_000n * MS;
      feed(go, [held(t, 3 + 2 * i, "PATCH", STATUS_PATH, { port: 8443, addr: "10.0.0.9" }), ...late(3 + 2 * i, STATUS_PATH), headers(t + MS, 3 + 2 * i, 500)]);
      go.drain(t + 1000n * MS);
    }
    feed(go, [held(200_000n * MS, 41, "PATCH", STATUS_PATH), ...late(41, STATUS_PATH), headers(200_001n * MS, 41, 500)]);
    go.drain(201_000n * MS);
    assert.deepEqual(losses.map((l) => [l.request?.streamId, l.request?.path]), [[41, STATUS_PATH]]);
    assert.deepEqual(drops, []);
  });

  it("a path printed for a stream starts afresh: pieces an earlier request at the same address left are not its", () => {
    const { go, losses } = harness();
    const other = STATUS_PATH.replace("w1", "elsewhere");
    feed(go, [
      held(1n * MS, 3, "PATCH", other, { port: 8443, addr: "10.0.0.9" }),
      ...late(3, other),
      headers(2n * MS, 3, 500),
      held(3n * MS, 3, "PATCH", STATUS_PATH),
      ...late(3, STATUS_PATH),
      headers(4n * MS, 3, 500),
    ]);
    go.drain(1000n * MS);
    assert.deepEqual(losses.map((l) => l.request?.path), [STATUS_PATH]);
  });

  it("follows requests to apiservers only, and reports status writes only", () => {
    const { go, losses } = harness();
    feed(go, [
      ...request(1n * MS, 3, "PATCH", STATUS_PATH, { port: 8443, addr: "10.0.0.9" }),
      ...request(2n * MS, 5, "PATCH", STATUS_PATH, { port: 0, addr: "0.0.0.0" }),
      ...request(3n * MS, 7, "GET", WATCH_PATH),
      ...request(3n * MS, 9, "PATCH", STATUS_PATH.replace("/status", "")),
      closed(4n * MS, 7),
    ]);
    go.drain(1000n * MS);
    assert.deepEqual(losses, [], "a watch and a write of the object itself die with the connection: the socket path counts that");
    assert.equal(go.size.requests, 0);
  });

  it("puts a long path together, keeping its end when it is too long to print whole", () => {
    const { go, losses } = harness();
    const name = "n".repeat(200);
    const medium = STATUS_PATH.replace("w1", name.slice(0, 150));
    const long = STATUS_PATH.replace("w1", `${name}${name}`);
    feed(go, [...request(1n * MS, 3, "PATCH", medium), ...request(2n * MS, 5, "PATCH", long), closed(3n * MS, 7)]);
    go.drain(1000n * MS);
    assert.equal(losses[0]!.request!.path, medium);
    const path = losses[1]!.request!.path;
    assert.ok(path.startsWith(long.slice(0, 240)) && path.endsWith(long.slice(-120)) && path.includes("…"), path);
  });

  it("drops the socket path's losses of a process a Go program followed then, all but failed connects", () => {
    const { go, losses, forwarded } = harness();
    // Before any program followed it: the socket path's, even once one does (the lines are applied in kernel time).
    go.offerSocketEvent(socketLoss(1n * MS, "connection_reset"), identity);
    go.setAttached(PID, true, 5n * MS);
    feed(go, [...request(10n * MS, 3, "PATCH", STATUS_PATH), closed(30n * MS, 7)]);
    // The socket path's view of the same death, and of things this path cannot see.
    go.offerSocketEvent(socketLoss(29n * MS, "connection_reset"), identity);
    go.offerSocketEvent(socketLoss(40n * MS, "write_failed"), identity);
    go.offerSocketEvent(socketLoss(41n * MS, "connect_failed"), identity);
    // Another connection, with no status write in flight (a watch's): nothing was lost that this path would not say.
    go.offerSocketEvent(socketLoss(42n * MS, "connection_reset", "10.96.0.2:443"), identity);
    // Stopped following it (the lines before then still count): the socket path speaks again.
    go.setAttached(PID, false, 45n * MS);
    go.offerSocketEvent(socketLoss(50n * MS, "connection_reset"), identity);
    go.drain(1000n * MS);
    assert.deepEqual(losses.map((l) => l.cause), ["connection_reset"]);
    assert.deepEqual(forwarded.map((e) => [e.kernelTimeNs / MS, e.cause, e.apiserver]), [
      [1n, "connection_reset", "10.96.0.1:443"],
      [41n, "connect_failed", "10.96.0.1:443"],
      [50n, "connection_reset", "10.96.0.1:443"],
    ]);
  });

  it("leaves to the socket path a request unanswered since before the program followed the process: it did not see it written", () => {
    const { go, losses, forwarded } = harness();
    go.setAttached(PID, true, 20n * MS);
    // Unanswered since 10 ms (written before the program followed), and since 25 ms (after): the second is this path's.
    go.offerSocketEvent(socketLoss(30n * MS, "connection_reset", "10.96.0.1:443", 20), identity);
    go.offerSocketEvent(socketLoss(60n * MS, "connection_reset", "10.96.0.1:443", 35), identity);
    go.drain(1000n * MS);
    assert.deepEqual(forwarded.map((e) => e.kernelTimeNs / MS), [30n]);
    assert.deepEqual(losses, [], "no request of it was seen: nothing of this path's was lost");
  });

  it("counts every request to an apiserver, of any method: the writes of a process whose sends the kernel leaves alone", () => {
    const requests: string[] = [];
    const { go } = harness({ onRequests: (pid, count) => requests.push(`${pid} ${count}`) });
    feed(go, [
      ...request(1n * MS, 1, "GET", `${WATCH_PATH}?watch=1`),
      ...request(2n * MS, 3, "PATCH", STATUS_PATH),
      ...request(3n * MS, 5, "PUT", STATUS_PATH, { port: 443, addr: "10.1.2.3" }),
    ]);
    go.drain(1000n * MS);
    assert.deepEqual(requests, [`${PID} 1`, `${PID} 1`]);
  });

  it("counts what the kernel counted of the requests it kept, once each, only once their peer is known to be an apiserver", () => {
    const counted: number[] = [];
    const { go } = harness({ onRequests: (_pid, count) => counted.push(count) });
    const counts = (entries: [number, bigint][]): GoRecord => ({ type: "counters", map: "goSent", entries: entries.map(([pid, value]) => ({ key: [pid], value })) });
    // A count before its peer (another CPU's buffer): waits for it.
    go.add(counts([[PID, 3n]]));
    assert.deepEqual(counted, []);
    go.add(peer(PID, 443, "10.96.0.1"));
    go.add(counts([[PID, 3n]])); // printed again unchanged: nothing new
    go.add(counts([[PID, 7n]]));
    // Another process, whose peer is no apiserver: never counted.
    go.add(peer(PID + 1, 8443, "10.0.0.9"));
    go.add(counts([[PID + 1, 40n]]));
    // The process exits: its last count, then a new process of the same pid counts from 0.
    go.add({ type: "go_sent", ts: 9n * MS, pid: PID, sent: 9n });
    go.add(peer(PID, 443, "10.96.0.1"));
    go.add(counts([[PID, 2n]]));
    assert.deepEqual(counted, [3, 4, 2, 2], "9 requests of the first process, 2 of the second");
  });

  it("counts from 0 again whenever a program starts following the process: a crash's successor, a merge's program, or the same one after letting it go", () => {
    const counted: number[] = [];
    const { go } = harness({ onRequests: (_pid, count) => counted.push(count) });
    const counts = (value: bigint): GoRecord => ({ type: "counters", map: "goSent", entries: [{ key: [PID], value }] });
    go.setAttached(PID, true, 1n * MS);
    feed(go, [peer(PID, 443, "10.96.0.1"), counts(10n)]);
    // Its program crashed; the next one counts from 0.
    go.setAttached(PID, false, 2n * MS);
    go.setAttached(PID, true, 3n * MS);
    feed(go, [peer(PID, 443, "10.96.0.1"), counts(4n), counts(12n)]);
    // The programs were merged: the merged one's count can pass the old one's last.
    go.setAttached(PID, false, 4n * MS);
    go.setAttached(PID, true, 5n * MS);
    feed(go, [peer(PID, 443, "10.96.0.1"), counts(15n)]);
    // No longer a target, then again: the program printed its count and deleted its entries when it let it go.
    feed(go, [{ type: "go_sent", ts: 6n * MS, pid: PID, sent: 16n }]);
    go.setAttached(PID, false, 6n * MS);
    go.setAttached(PID, true, 7n * MS);
    feed(go, [peer(PID, 443, "10.96.0.1"), counts(1n)]);
    assert.deepEqual(counted, [10, 4, 8, 15, 1, 1]);
  });

  it("a request the kernel printed late is judged with its process's peer, also when the process exited before the line was applied", () => {
    const { go, losses } = harness();
    go.add(peer(PID, 443, "10.96.0.1"));
    feed(go, [...kept(5n * MS, 3, "PATCH", STATUS_PATH), closed(9n * MS, 7), { type: "go_sent", ts: 10n * MS, pid: PID, sent: 1n }]);
    go.drain(1000n * MS);
    assert.deepEqual(losses.map((e) => [e.cause, e.apiserver]), [["connection_reset", "10.96.0.1:443"]]);
  });

  it("a request the kernel printed late is judged with its process's peer, and not counted again", () => {
    const counted: number[] = [];
    const { go, losses } = harness({ onRequests: (_pid, count) => counted.push(count) });
    go.add(peer(PID, 443, "10.96.0.1"));
    feed(go, [...kept(5n * MS, 3, "PATCH", STATUS_PATH), closed(9n * MS, 7)]);
    go.drain(1000n * MS);
    assert.deepEqual(losses.map((e) => [e.cause, e.apiserver, e.request?.path, e.unansweredForMs]), [["connection_reset", "10.96.0.1:443", STATUS_PATH, 4]]);
    assert.deepEqual(counted, [], "the kernel counted it");
  });

  it("tells a clean close with requests unanswered, by who closed; a reset, a timeout or nothing unanswered is not its to count", () => {
    const reasons: string[] = [];
    const { go } = harness({ onConnectionLoss: (pid, reason) => reasons.push(`${pid} ${reason}`) });
    // A watch answered (its stream no longer waits), then one close per state.
    for (const [i, state] of [8, 4, 7, 0].entries()) {
      const t = BigInt(i * 100);
      feed(go, [...request((t + 1n) * MS, 1, "GET", `${WATCH_PATH}?watch=1`), headers((t + 2n) * MS, 1, 200), ...request((t + 3n) * MS, 3, "PATCH", STATUS_PATH), closed((t + 4n) * MS, state)]);
    }
    feed(go, [...request(501n * MS, 1, "GET", `${WATCH_PATH}?watch=1`), headers(502n * MS, 1, 200), closed(503n * MS, 8)]);
    go.drain(1000n * MS);
    assert.deepEqual(reasons, [`${PID} closed_unanswered`, `${PID} closed_by_client`]);
  });

  it("says when a process's requests start and stop being read, once per change", () => {
    const changes: string[] = [];
    const { go } = harness({ onAttached: (pid, attached) => changes.push(`${pid} ${attached}`) });
    go.setAttached(PID, true);
    go.setAttached(PID, true);
    assert.deepEqual(go.attachedPids(), [PID]);
    go.forget(PID);
    go.forget(PID);
    assert.deepEqual([changes, go.attachedPids()], [[`${PID} true`, `${PID} false`], []]);
  });

  it("drops the requests followed when its program went away: their answers may have come unseen, a later connection end must not lose them", () => {
    const { go, losses } = harness();
    go.setAttached(PID, true);
    // Followed, then the program restarts (another replica of its binary came): the answer falls in the gap.
    feed(go, [...request(1n * MS, 3, "PATCH", STATUS_PATH), ...request(2n * MS, 5, "PATCH", STATUS_PATH)]);
    feed(go, [headers(3n * MS, 5, 200)]); // printed before the program went away: still applied
    go.setAttached(PID, false, 4n * MS);
    go.setAttached(PID, true);
    // The new program follows a new request; then the connection ends.
    feed(go, [...request(900n * MS, 7, "PATCH", STATUS_PATH), closed(1000n * MS, 8)]);
    go.drain(2000n * MS);
    assert.deepEqual(losses.map((l) => l.request?.streamId), [7]);
    assert.equal(go.size.requests, 0);
  });

  it("forgets the requests of a process that is no target any more", () => {
    const { go, losses } = harness();
    feed(go, [...request(1n * MS, 3, "PATCH", STATUS_PATH)]);
    go.drain(1000n * MS);
    assert.equal(go.size.requests, 1);
    go.forget(PID);
    feed(go, [closed(1001n * MS, 7)]);
    go.drain(2000n * MS);
    assert.deepEqual([go.size.requests, losses.length], [0, 0]);
  });

  it("forgets a process at a kernel time: what its program printed before then is still decided", () => {
    const { go, losses } = harness();
    go.setAttached(PID, true);
    feed(go, [...request(1n * MS, 3, "PATCH", STATUS_PATH), closed(5n * MS, 8), ...request(6n * MS, 5, "PATCH", STATUS_PATH)]);
    go.forget(PID, 10n * MS);
    feed(go, [closed(20n * MS, 7)]);
    go.drain(1000n * MS);
    assert.deepEqual([losses.map((l) => [l.request?.streamId, l.cause]), go.size.requests], [[[3, "connection_closed_unanswered"]], 0]);
  });

  it("is bounded: lines beyond capacity are applied early and counted", () => {
    const { go, losses, drops } = harness({ capacity: 4 });
    feed(go, [...request(1n * MS, 3, "PATCH", STATUS_PATH), closed(2n * MS, 7), ...request(3n * MS, 5, "PATCH", STATUS_PATH), closed(4n * MS, 7), abort(5n * MS, 9)]);
    assert.deepEqual(drops, ["capacity"]);
    go.flush();
    assert.equal(losses.length, 2);
  });
});
