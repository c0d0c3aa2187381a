// Event types that cross stage boundaries. Every stage reads and writes only
// these shapes, so a stage can be tested alone with fixtures of them.
import type { ApiObject } from "./apiPath.ts";
import type { ConnectionLossReason, LossCause, Noticed } from "./vocabulary/causes.ts";

export type { ConnectionLossReason, LossCause, Noticed };

/** Which process a socket event belongs to, as far as the agent knows. */
export interface ProcessIdentity {
  pid: number;
  tid: number;
  /** The task's comm (kernel `comm`, at most 15 bytes). */
  process: string;
  namespace: string;
  pod: string;
  container: string;
  /** Owner workload of the pod (e.g. the Deployment); "" outside Kubernetes. */
  controller: string;
}



/** A failure seen by the kernel on a socket whose peer is an apiserver. */
export interface SocketEvent {
  /** CLOCK_MONOTONIC nanoseconds of the failure, from the kernel. */
  kernelTimeNs: bigint;
  pid: number;
  tid: number;
  process: string;
  /** write, writev, sendto, sendmsg, connect; "unknown" when the kernel path does not say; null for a connection death. */
  syscall: string | null;
  /** Negative errno or the byte count the syscall returned; null when no syscall failed. */
  ret: number | null;
  /** Symbolic errno (EPIPE) or null for a zero-byte write. */
  errno: string | null;
  /** Bytes the caller asked to send, when known. */
  bytes: number | null;
  /** Peer as "addr:port" ("[v6]:port" for IPv6). */
  apiserver: string;
  cause: LossCause;
  /** For connection deaths: bytes written and never answered, and for how long. */
  unansweredBytes: number | null;
  unansweredForMs: number | null;
  /** TCP retransmits on this connection shortly before it died. */
  retransmits: number | null;
  /** The request itself, where a probe could read it (Go's HTTP/2 client); absent from the socket path. */
  request?: KernelRequest;
  /** "uncertain": the wire cannot tell whether what arrived was its answer (a TLS 1.3 session ticket may look alike). */
  verdict?: "uncertain";
}

/** A request as a uprobe read it from the client's memory. */
export interface KernelRequest {
  method: string;
  path: string;
  /** The response status when one arrived (a rejection); null when none did. */
  statusCode: number | null;
  /** The HTTP/2 stream id on its connection. */
  streamId: number;
}

export interface ReconcileRef {
  controller: string | null;
  namespace: string | null;
  name: string | null;
  kind: string | null;
}

export interface RequestRef {
  method: string | null;
  path: string | null;
  status_code: number | null;
  /** The HTTP/2 stream id, when the kernel read the request (Go clients); null otherwise. */
  stream_id?: number | null;
  /** The object the path names; null when it names none. */
  object?: ApiObject | null;
}

export type Correlation = "span" | "ambiguous" | "none";

export interface CandidateSpan {
  trace_id: string;
  span_id: string;
  reconcile: ReconcileRef | null;
  request: RequestRef | null;
}

/** The loss event of the public contract (README, docs/metrics.md): JSON on /events, log lines, tail. */
export interface LossEvent {
  kind: "status_write_lost";
  time: string;
  node: string;
  namespace: string | null;
  pod: string | null;
  container: string | null;
  process: string | null;
  pid: number | null;
  tid: number | null;
  cause: LossCause;
  syscall: string | null;
  errno: string | null;
  ret: number | null;
  bytes: number | null;
  apiserver: string | null;
  noticed: Noticed;
  correlation: Correlation;
  trace_id: string | null;
  span_id: string | null;
  reconcile: ReconcileRef | null;
  request: RequestRef | null;
  unanswered_bytes: number | null;
  unanswered_for_ms: number | null;
  retransmits: number | null;
  candidates?: CandidateSpan[];
  /**
   * Present ("uncertain") only when the kernel could not tell whether the
   * request was answered: a fresh connection's first request answered by no
   * more than what a TLS 1.3 server's session tickets look like, then reset,
   * with no TLS program to read the answer (probes/apiserver_sockets.bt, AMBIGUOUS).
   */
  verdict?: "uncertain";
}
