// What the OTLP transports (HTTP and gRPC) do with a request body once they
// have read it within their limits, written once so that both judge, count
// and forward alike: decode, attribute each resource's spans to their sender
// (senderTrust.ts: by the pod's address in Kubernetes mode, and by the
// process holding the connection, senderIdentity.ts), hand the spans of
// proven senders to correlation, record and forward the body. The transports
// only translate the verdict into their status codes. Nothing a client sends
// can throw out of here.
import type { Socket } from "node:net";
import { isRejectedStatusWrite } from "../../correlate/spanVerdict.ts";
import type { Logger } from "../../telemetry/log.ts";
import type { AgentMetrics, SpanRejectReason } from "../../telemetry/metrics.ts";
import { type IndexedSpan, type SpanProcess, toIndexedSpans } from "./indexedSpans.ts";
import { createOtlpForwarder, type OtlpForwarder } from "./otlpForwarder.ts";
import { decodeJsonTraceRequest } from "./otlpJson.ts";
import { decodeProtobufTraceRequest, type PartialSuccess } from "./otlpProtobuf.ts";
import type { WireRequest } from "./otlpWire.ts";
import type { RecordedSender } from "../record/format.ts";
import type { SenderIdentity } from "./senderIdentity.ts";
import {
  attributeSender,
  type ClaimVerdict,
  type ConnectionSender,
  identifySender,
  judgeClaims,
  type SenderDirectory,
  type SenderRejectReason,
  type SenderVerdict,
} from "./senderTrust.ts";

export const MEDIA_TYPES = {
  "application/x-protobuf": decodeProtobufTraceRequest,
  "application/json": decodeJsonTraceRequest,
} as const satisfies Record<string, (body: Uint8Array) => WireRequest>;
export type MediaType = keyof typeof MEDIA_TYPES;

export function isMediaType(value: string): value is MediaType {
  return Object.hasOwn(MEDIA_TYPES, value);
}

/** Decodes one OTLP traces body of a supported media type as sent (resource attributes as claimed); throws on malformed input. */
export function decodeTraceBody(mediaType: string, body: Uint8Array, peerAddress: string | null): IndexedSpan[] {
  if (!isMediaType(mediaType)) throw new Error(`unsupported media type "${mediaType}"`);
  return toIndexedSpans(MEDIA_TYPES[mediaType](body), peerAddress);
}

/**
 * A recorded body's spans as the live intake judged them (replay): a target's
 * resources held to that process, a forwarder's as claimed, anything else's
 * not correlated at all. A recording without a sender (made before
 * connections were judged) is taken as its resources claim.
 */
export function judgeRecordedSpans(spans: IndexedSpan[], sender: RecordedSender | undefined, podsKnown: boolean): IndexedSpan[] {
  if (sender === undefined || sender.kind === "forwarder") return spans;
  if (sender.kind === "other") return [];
  const known: ConnectionSender = {
    kind: "target",
    process: { hostPid: sender.pid, nsPid: sender.nsPid, comm: sender.comm, namespace: sender.namespace, pod: sender.pod },
  };
  const verdicts = new Map<SpanProcess, ClaimVerdict>();
  const out: IndexedSpan[] = [];
  for (const span of spans) {
    let verdict = verdicts.get(span.process);
    if (verdict === undefined) {
      verdict = judgeClaims(span.process, known, { podsKnown, namedTarget: () => null });
      verdicts.set(span.process, verdict);
    }
    if (verdict.ok) out.push({ ...span, process: verdict.process });
  }
  return out;
}

export interface SpanIntakeOptions {
  metrics: AgentMetrics;
  /** Takes the accepted spans of one request; false means the intake queue is full. */
  onSpans: (spans: IndexedSpan[], peer: { address: string }) => boolean;
  /** This node's pods by address (Kubernetes mode); null outside it, where resources are taken as sent. */
  senders?: () => SenderDirectory | null;
  /**
   * Who holds each connection's client end (the live agent); without it a
   * resource's process is taken as claimed (or by address in Kubernetes mode).
   */
  identity?: Pick<SenderIdentity, "track" | "senderOf" | "namedTarget" | "podsKnown">;
  /** Where a refused claim is logged (rate-limited). */
  log?: Pick<Logger, "warnRateLimited">;
  /** Every accepted body, decoded, for `--record` (replay decodes it with decodeTraceBody and judges it by `sender`). */
  onAccepted?: (batch: { body: Uint8Array; contentType: string; peer: string; sender: ConnectionSender | null }) => void;
  /** Upstream OTLP/HTTP traces URL every accepted request is passed on to, byte for byte. */
  forwardUrl?: string;
}

interface IntakeBody {
  mediaType: MediaType;
  /** After Content-Encoding / grpc-encoding: what is decoded. */
  decoded: Uint8Array;
  /** What is forwarded: the body as sent, with its headers. */
  forward: { body: Buffer; contentType: string; contentEncoding: string | null };
  /** The remote address and port of the request's connection. */
  peer: string | null;
  peerPort: number | null;
}

type IntakeVerdict =
  | { ok: true; accepted: number; partial: (PartialSuccess & { reason: SenderRejectReason }) | null }
  | { ok: false; reason: "malformed" | SenderRejectReason | "queue_full"; detail: string };

export class SpanIntake {
  readonly #opts: SpanIntakeOptions;
  readonly #forwarder: OtlpForwarder | null;

  constructor(opts: SpanIntakeOptions) {
    this.#opts = opts;
    this.#forwarder = opts.forwardUrl !== undefined ? createOtlpForwarder({ url: opts.forwardUrl, metrics: opts.metrics }) : null;
  }

  /**
   * Whether a request from `peer` can be taken at all: in Kubernetes mode an
   * address that is no pod of the node, nor the node, is refused (and
   * counted) before its body is read. Null when it may go on.
   */
  screen(peer: string | null): { reason: "unknown_sender" | "senders_not_listed"; detail: string } | null {
    const directory = this.#opts.senders?.() ?? null;
    if (directory === null) return null;
    const sender = identifySender(peer, directory);
    if (sender.ok) return null;
    this.reject(sender.reason);
    return { reason: sender.reason, detail: sender.detail };
  }

  /** A transport accepted a connection: its sender is looked up when it first sends. */
  track(socket: Socket): void {
    this.#opts.identity?.track(socket);
  }

  /** Counts a request the transport refused before (or instead of) taking it. */
  reject(reason: SpanRejectReason): void {
    this.#opts.metrics.spansRejected.inc({ reason });
  }

  /**
   * Judges one request. A request is refused whole when it is malformed,
   * comes from no known sender, or none of its spans could be kept; when
   * only some resources name another pod than their sender, the rest is
   * taken and the answer is a partial success. Every refusal is counted once.
   */
  async take(body: IntakeBody): Promise<IntakeVerdict> {
    const verdict = await this.#judge(body);
    if (!verdict.ok) this.reject(verdict.reason);
    else if (verdict.partial !== null) this.reject(verdict.partial.reason);
    return verdict;
  }

  async #judge(body: IntakeBody): Promise<IntakeVerdict> {
    let claimed: IndexedSpan[];
    try {
      claimed = toIndexedSpans(MEDIA_TYPES[body.mediaType](body.decoded), body.peer);
    } catch (err) {
      return { ok: false, reason: "malformed", detail: `malformed OTLP ${body.mediaType}: ${describe(err)}` };
    }
    const directory = this.#opts.senders?.() ?? null;
    const identity = this.#opts.identity ?? null;
    const sender = identity === null ? null : await identity.senderOf(body.peer, body.peerPort);
    // One verdict per resource: its spans share one process object.
    const verdicts = new Map<SpanProcess, SenderVerdict & { proven?: boolean }>();
    const proven: IndexedSpan[] = [];
    let accepted = 0;
    let rejected = 0;
    let untrustedLosses = 0;
    let firstRefusal: Extract<SenderVerdict, { ok: false }> | null = null;
    for (const span of claimed) {
      let verdict = verdicts.get(span.process);
      if (verdict === undefined) {
        verdict = this.#attribute(span.process, directory, sender);
        verdicts.set(span.process, verdict);
      }
      if (!verdict.ok) {
        rejected++;
        firstRefusal ??= verdict;
        continue;
      }
      accepted++;
      if (verdict.proven === false) {
        // Passed on, but it proves nothing about a target: never correlated, never a loss.
        if (isRejectedStatusWrite(span)) untrustedLosses++;
        continue;
      }
      proven.push(verdict.process === span.process ? span : { ...span, process: verdict.process });
    }
    if (firstRefusal !== null && accepted === 0) return { ok: false, reason: firstRefusal.reason, detail: firstRefusal.detail };
    const peer = body.peer ?? "";
    if (proven.length > 0 && !this.#opts.onSpans(proven, { address: peer })) {
      return { ok: false, reason: "queue_full", detail: "span intake queue full" };
    }
    this.#opts.metrics.spansReceived.inc(accepted);
    if (untrustedLosses > 0) this.#opts.metrics.spanLossesUntrusted.inc(untrustedLosses);
    this.#opts.onAccepted?.({ body: body.decoded, contentType: body.mediaType, peer, sender });
    this.#forwarder?.enqueue(body.forward);
    const partial =
      firstRefusal === null
        ? null
        : { reason: firstRefusal.reason, rejectedSpans: rejected, errorMessage: `${rejected} span(s) refused: ${firstRefusal.detail}` };
    return { ok: true, accepted, partial };
  }

  /**
   * One resource's process: a forwarder's as claimed; else by address in
   * Kubernetes mode, then held to the connection's process when it is known.
   */
  #attribute(claimed: SpanProcess, directory: SenderDirectory | null, sender: ConnectionSender | null): SenderVerdict & { proven?: boolean } {
    const identity = this.#opts.identity;
    if (sender === null || identity === undefined) return attributeSender(claimed, directory);
    if (sender.kind === "forwarder") return judgeClaims(claimed, sender, { podsKnown: identity.podsKnown, namedTarget: () => null });
    const byAddress = attributeSender(claimed, directory);
    if (!byAddress.ok) return byAddress;
    const verdict: ClaimVerdict = judgeClaims(byAddress.process, sender, { podsKnown: identity.podsKnown, namedTarget: (c) => identity.namedTarget(c) });
    if (!verdict.ok) {
      this.#opts.log?.warnRateLimited("span-sender-mismatch", "spans refused: their resource claims another process than the one that sent them", {
        claimed: verdict.claimed,
        actual: verdict.actual,
        peer: claimed.peerAddress,
      });
    }
    return verdict;
  }

  /** Sends what the forwarder holds (bounded by its timeout), then stops. */
  async close(): Promise<void> {
    await this.#forwarder?.close();
  }
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
