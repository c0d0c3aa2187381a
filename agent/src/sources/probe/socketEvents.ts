// Turns probe records into the agent's SocketEvents and connection-loss
// verdicts. This is where kernel numbers become names (errno, syscall) and
// where a closed connection is judged: lost request, idle death, or normal.
import os from "node:os";
import type { ConnectionLossReason, SocketEvent } from "../../model.ts";
import type { ProbeRecord } from "./probeOutput.ts";
import { formatHostPort } from "../../hostPort.ts";
import { syscallName } from "../../vocabulary/syscalls.ts";

// Aliases share a number (EWOULDBLOCK = EAGAIN): the first, canonical name wins.
const ERRNO_NAMES = new Map<number, string>();
for (const [name, value] of Object.entries(os.constants.errno)) if (!ERRNO_NAMES.has(value)) ERRNO_NAMES.set(value, name);
const ETIMEDOUT = os.constants.errno.ETIMEDOUT;
const ECONNRESET = os.constants.errno.ECONNRESET;

export function errnoName(errno: number): string {
  return ERRNO_NAMES.get(errno) ?? `E${errno}`;
}


const peer = formatHostPort;

const base = { unansweredBytes: null, unansweredForMs: null, retransmits: null } as const;

export type ProbeVerdict =
  | { kind: "loss"; event: SocketEvent; connectionLoss: ConnectionLossReason | null }
  | { kind: "connection_loss"; pid: number; process: string; reason: ConnectionLossReason }
  | { kind: "none" };

export interface VerdictOptions {
  /**
   * Unanswered bytes below this are protocol chatter (an HTTP/2 WINDOW_UPDATE
   * or PING in a TLS record is ~40 bytes), not a request.
   */
  unansweredMinBytes: number;
}

export function judge(record: ProbeRecord, opts: VerdictOptions): ProbeVerdict {
  switch (record.type) {
    case "send":
      return {
        kind: "loss",
        connectionLoss: null,
        event: {
          ...base,
          kernelTimeNs: record.ts,
          pid: record.pid,
          tid: record.tid,
          process: record.comm,
          syscall: syscallName(record.syscallNr),
          ret: record.ret,
          errno: record.ret < 0 ? errnoName(-record.ret) : null,
          bytes: null,
          apiserver: peer(record.addr, record.port),
          cause: record.ret === 0 ? "zero_byte_write" : "write_failed",
        },
      };
    case "connect":
      return {
        kind: "loss",
        connectionLoss: null,
        event: {
          ...base,
          kernelTimeNs: record.ts,
          pid: record.pid,
          tid: record.tid,
          process: record.comm,
          syscall: "connect",
          ret: record.err ? -record.err : null,
          errno: record.err ? errnoName(record.err) : null,
          bytes: null,
          apiserver: peer(record.addr, record.port),
          cause: "connect_failed",
        },
      };
    case "close": {
      const failed = record.reset || record.err !== 0;
      const reason: ConnectionLossReason | null =
        record.err === ETIMEDOUT ? "timeout" : failed ? "reset" : record.unansweredBytes >= opts.unansweredMinBytes ? "closed_unanswered" : null;
      if (record.unansweredBytes < opts.unansweredMinBytes) {
        return reason ? { kind: "connection_loss", pid: record.pid, process: record.comm, reason } : { kind: "none" };
      }
      const errno = record.err ? record.err : record.reset ? ECONNRESET : 0;
      return {
        kind: "loss",
        connectionLoss: reason,
        event: {
          kernelTimeNs: record.ts,
          pid: record.pid,
          tid: record.tid,
          process: record.comm,
          syscall: null,
          ret: null,
          errno: errno ? errnoName(errno) : null,
          bytes: record.unansweredBytes,
          apiserver: peer(record.addr, record.port),
          cause: failed ? "connection_reset" : "connection_closed_unanswered",
          unansweredBytes: record.unansweredBytes,
          unansweredForMs: Number(record.waitedNs / 1000n) / 1000,
          retransmits: record.retransmits,
        },
      };
    }
    default:
      return { kind: "none" };
  }
}

/**
 * One lost request, one event: a connection that died with a request
 * unanswered is often followed, within microseconds, by the failure of the
 * write that was blocked on it (ETIMEDOUT) or of the next frame written into
 * it (EPIPE, ECONNRESET). Such a send failure by the same process to the same
 * apiserver, right after the death was reported, is the death's echo: still
 * counted as a failed syscall, not as a second loss. Keyed on kernel time, so
 * replay judges the same way.
 */
export class DeadConnectionEchoes {
  private readonly deaths = new Map<string, bigint>();
  private readonly windowNs: bigint;
  private readonly capacity: number;

  constructor(windowMs = 100, capacity = 1024) {
    this.windowNs = BigInt(windowMs) * 1_000_000n;
    this.capacity = capacity;
  }

  note(event: SocketEvent): void {
    if (event.cause !== "connection_reset" && event.cause !== "connection_closed_unanswered") return;
    const key = `${event.pid}/${event.apiserver}`;
    this.deaths.delete(key);
    this.deaths.set(key, event.kernelTimeNs);
    if (this.deaths.size > this.capacity) this.deaths.delete(this.deaths.keys().next().value!);
  }

  isEcho(event: SocketEvent): boolean {
    if (event.cause !== "write_failed" || !ECHO_ERRNOS.has(event.errno ?? "")) return false;
    const died = this.deaths.get(`${event.pid}/${event.apiserver}`);
    return died !== undefined && event.kernelTimeNs >= died && event.kernelTimeNs - died <= this.windowNs;
  }
}

const ECHO_ERRNOS = new Set(["EPIPE", "ECONNRESET", "ETIMEDOUT"]);
