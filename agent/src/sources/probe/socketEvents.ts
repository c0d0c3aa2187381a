// Turns probe records into the agent's SocketEvents and connection-loss
// verdicts. This is where kernel numbers become names (errno, syscall) and
// where a closed connection is judged: lost request, idle death, or normal.
import os from "node:os";
import type { ConnectionLossReason, SocketEvent } from "../../model.ts";
import type { ProbeRecord } from "./probeOutput.ts";
import { formatHostPort } from "../../hostPort.ts";
import { syscallName } from "../../vocabulary/syscalls.ts";
import { CLOSED_BY } from "../../vocabulary/closedBy.ts";
import { errnoName } from "../../vocabulary/errno.ts";

const ETIMEDOUT = os.constants.errno.ETIMEDOUT;
const ECONNRESET = os.constants.errno.ECONNRESET;
const EPIPE = os.constants.errno.EPIPE;

const peer = formatHostPort;

const base = { unansweredBytes: null, unansweredForMs: null, retransmits: null } as const;

type ProbeVerdict =
  | { kind: "loss"; event: SocketEvent; connectionLoss: ConnectionLossReason | null }
  | { kind: "connection_loss"; pid: number; process: string; reason: ConnectionLossReason }
  | { kind: "none" };

interface VerdictOptions {
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
      // The client's own FIN (or abortive close) came first: it gave up on
      // the request, whatever the apiserver did after.
      const byClient = record.closedBy === CLOSED_BY.target;
      // The apiserver's FIN came first and a reset answered what the client
      // wrote after it (the kernel sets EPIPE for a reset in CLOSE_WAIT): the
      // apiserver closed the connection; the reset is its echo.
      const resetAfterClose = record.closedBy === CLOSED_BY.apiserver && record.err === EPIPE;
      const failed = !resetAfterClose && (record.reset || record.err !== 0);
      const unanswered = record.unansweredBytes >= opts.unansweredMinBytes;
      const reason: ConnectionLossReason | null = byClient
        ? unanswered ? "closed_by_client" : null
        : record.err === ETIMEDOUT ? "timeout" : failed ? "reset" : unanswered ? "closed_unanswered" : null;
      if (!unanswered) {
        return reason ? { kind: "connection_loss", pid: record.pid, process: record.comm, reason } : { kind: "none" };
      }
      const errno = resetAfterClose ? 0 : record.err ? record.err : record.reset ? ECONNRESET : 0;
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
          cause: byClient ? "client_gave_up" : failed ? "connection_reset" : "connection_closed_unanswered",
          unansweredBytes: record.unansweredBytes,
          unansweredForMs: Number(record.waitedNs / 1000n) / 1000,
          retransmits: record.retransmits,
          ...("uncertain" in record && record.uncertain === true ? { verdict: "uncertain" as const } : {}),
        },
      };
    }
    default:
      return { kind: "none" };
  }
}
