// Answers as the TLS client read them, in place of bytes on the wire, for the
// connections of targets whose OpenSSL a TLS program follows
// (probes/tls_answers.bt). On the wire a TLS 1.3 session ticket that arrives
// after the first request of a fresh connection looks like its answer; the
// TLS program knows better, and prints, when a connection it follows reaches
// CLOSE, the plaintext bytes still unanswered (tls_close).
//
// Both programs print at the same kernel event, from two bpftrace processes,
// so their lines arrive in either order. The socket probe's send and close
// lines of a followed process wait here (in arrival order) until the TLS
// verdict for the same socket (SK) is in, or `holdNs` has passed: a close
// then carries the TLS program's unanswered bytes and wait, and is judged as
// any other. Who closed it, too, where TLS knows better than TCP: a client
// that read the server's close_notify and closed its socket sent the first
// FIN, but the server ended the connection. A socket that closed with a request the TLS program saw
// unanswered, where the bytes on the wire had looked answered, is this
// socket's one loss: a failed send on it later is counted by the kernel and
// not reported again (the kernel's own mark did not see it die).
//
// A program that started following a process in the middle of a request
// (the first process of a library, followed once its program attached) did
// not see that request written: where the wire says a request that started
// before then is unanswered, the wire's count stands.
import { BoundedMap } from "../../boundedMap.ts";
import type { PrintfRecordOf } from "../probe/probeLines.ts";
import type { ProbeRecord } from "../probe/probeOutput.ts";
import { CLOSED_BY } from "../../vocabulary/closedBy.ts";

export type TlsCloseRecord = PrintfRecordOf<"tls_close">;

/**
 * A TLS program following `pid` attached or went away. It travels in the
 * same queue as the probe records (and is recorded in their order), so that
 * replay applies it between the same records as the live agent did.
 */
export interface TlsAttachment {
  type: "tls_attached";
  pid: number;
  attached: boolean;
  /** Attached: since when (kernel ns) the program follows the pid. */
  since: bigint;
}

interface TlsAnswersOptions {
  /** A socket probe record, its close with the TLS verdict when there was one: on to be judged. */
  release: (record: ProbeRecord) => void;
  /** The agent's --unanswered-min-bytes: a close leaving this much unanswered is a loss. */
  unansweredMinBytes: number;
  /** How long a record waits for its socket's TLS verdict (default 50 ms). */
  holdNs?: bigint;
  /** Records waiting, verdicts waiting, sockets remembered dead (default 4096 each). */
  capacity?: number;
  /** Something did not fit: lostwrite_events_dropped_total's reason. */
  onDrop: (reason: "capacity") => void;
}

type SocketRecord = PrintfRecordOf<"send"> | PrintfRecordOf<"close">;

/** A close whose request the wire took for answered only by what may be TLS session tickets, and no TLS verdict for it: a loss, uncertain. */
export type UncertainClose = PrintfRecordOf<"close"> & { uncertain: true };

/** How long a verdict, or a socket the TLS program saw die, is kept for a line that may still name it. */
const REMEMBER_NS = 60_000_000_000n;

export class TlsAnswers {
  readonly #o: Required<TlsAnswersOptions>;
  /** pid → since when its TLS program follows it (kernel ns). */
  readonly #followed = new Map<number, bigint>();
  readonly #waiting: SocketRecord[] = [];
  /** sk → the TLS program's verdict, until its close line comes. */
  readonly #verdicts: BoundedMap<bigint, TlsCloseRecord>;
  /** sk → when the TLS program saw it die with a request unanswered that the wire had taken for answered. */
  readonly #deadByTls: BoundedMap<bigint, bigint>;
  /** sk → the socket probe's `ambiguous` line, printed right before that socket's close line. */
  readonly #ambiguous: BoundedMap<bigint, PrintfRecordOf<"ambiguous">>;
  #latestNs = 0n;
  #onWaiting: () => void = () => {};

  constructor(opts: TlsAnswersOptions) {
    this.#o = { holdNs: 50_000_000n, capacity: 4096, ...opts };
    // Each past capacity forgets its oldest socket, counted.
    const dropped = (): void => this.#o.onDrop("capacity");
    this.#verdicts = new BoundedMap(this.#o.capacity, dropped);
    this.#deadByTls = new BoundedMap(this.#o.capacity, dropped);
    this.#ambiguous = new BoundedMap(this.#o.capacity, dropped);
  }

  /** Told when a record starts waiting: whoever drains should look again within `holdNs`. */
  onWaiting(listener: () => void): void {
    this.#onWaiting = listener;
  }

  /** Records of `pid` wait for its TLS verdicts from now on (true, followed since kernel time `since`), or no longer (false). */
  setAttached(pid: number, attached: boolean, since = 0n): void {
    if (attached) this.#followed.set(pid, since);
    else this.#followed.delete(pid);
  }

  get busy(): boolean {
    return this.#waiting.length > 0;
  }

  get size(): { waiting: number; verdicts: number } {
    return { waiting: this.#waiting.length, verdicts: this.#verdicts.size };
  }

  /** The TLS program's verdict for one socket. */
  addVerdict(record: TlsCloseRecord): void {
    this.#see(record.ts);
    this.#verdicts.set(record.sk, record);
    this.drain(this.#latestNs);
  }

  /** True when the record is taken: it comes back through `release`, in order. */
  offer(record: ProbeRecord): boolean {
    if (record.type === "ambiguous") {
      this.#ambiguous.set(record.sk, record);
      return true;
    }
    if (record.type !== "send" && record.type !== "close") return false;
    if (!this.#followed.has(record.pid) && this.#waiting.length === 0) {
      this.#release(record); // nothing to wait for, nothing to keep the order of
      return true;
    }
    this.#see(record.ts);
    if (this.#waiting.length >= this.#o.capacity) {
      // Judged now, by the bytes on the wire, rather than lost.
      this.#o.onDrop("capacity");
      this.#release(this.#waiting.shift()!);
    }
    this.#waiting.push(record);
    this.drain(this.#latestNs);
    if (this.#waiting.length > 0) this.#onWaiting();
    return true;
  }

  /** Releases what is decided: every record before the first close still waiting for its verdict within `holdNs`. */
  drain(nowNs: bigint): void {
    while (this.#waiting.length > 0) {
      const head = this.#waiting[0]!;
      if (head.type === "close" && this.#followed.has(head.pid) && !this.#verdicts.has(head.sk) && nowNs - head.ts < this.#o.holdNs) break;
      this.#waiting.shift();
      this.#release(head);
    }
    this.#forgetOlderThan(nowNs - REMEMBER_NS);
  }

  /** Releases everything (the agent is stopping, or replay is done). */
  flush(): void {
    while (this.#waiting.length > 0) this.#release(this.#waiting.shift()!);
  }

  #see(ts: bigint): void {
    if (ts > this.#latestNs) this.#latestNs = ts;
  }

  /** On to be judged: a close with its socket's TLS verdict, if any; a failed send on a socket that verdict reported dead is folded. */
  #release(record: SocketRecord): void {
    if (record.type === "send") {
      // Counted in the kernel's @failed_sends; reported once, by the close.
      if (!(record.ret < 0 && this.#deadByTls.has(record.sk))) this.#o.release(record);
      return;
    }
    // A socket address closing again is a new connection: whatever was remembered of the old one goes.
    this.#deadByTls.delete(record.sk);
    const ambiguous = this.#ambiguous.get(record.sk);
    this.#ambiguous.delete(record.sk);
    const verdict = this.#verdicts.get(record.sk);
    if (verdict === undefined || verdict.pid !== record.pid) {
      if (ambiguous?.pid === record.pid && record.unansweredBytes < this.#o.unansweredMinBytes) {
        // No TLS program read the answer: what the wire could not tell is reported, as uncertain.
        const uncertain: UncertainClose = { ...record, unansweredBytes: ambiguous.bytes, waitedNs: ambiguous.waitedNs, uncertain: true };
        this.#o.release(uncertain);
        return;
      }
      this.#o.release(record);
      return;
    }
    this.#verdicts.delete(record.sk);
    const since = this.#followed.get(record.pid);
    if (since !== undefined && record.unansweredBytes > 0 && record.ts - record.waitedNs < since) {
      this.#o.release(record); // the request the wire saw unanswered began before the program followed
      return;
    }
    const min = this.#o.unansweredMinBytes;
    if (verdict.unansweredBytes >= min && record.unansweredBytes < min) {
      this.#deadByTls.set(record.sk, record.ts);
    }
    // The client's FIN that follows the server's close_notify answers it: the server ended the connection.
    const closedBy = verdict.peerClosed && record.closedBy === CLOSED_BY.target ? CLOSED_BY.apiserver : record.closedBy;
    this.#o.release({ ...record, unansweredBytes: verdict.unansweredBytes, waitedNs: verdict.waitedNs, closedBy });
  }

  #forgetOlderThan(limitNs: bigint): void {
    for (const [sk, verdict] of this.#verdicts) {
      if (verdict.ts >= limitNs) break;
      this.#verdicts.delete(sk); // a TLS connection the socket probe does not follow (not to an apiserver)
    }
    for (const [sk, ts] of this.#deadByTls) {
      if (ts >= limitNs) break;
      this.#deadByTls.delete(sk);
    }
    for (const [sk, ambiguous] of this.#ambiguous) {
      if (ambiguous.ts >= limitNs) break;
      this.#ambiguous.delete(sk); // its close line never came (a record dropped)
    }
  }
}
