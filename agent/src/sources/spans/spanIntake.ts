// What the OTLP transports (HTTP and gRPC) do with a request body once they
// have read it within their limits, written once so that both judge, count
// and forward alike: decode, attribute each resource's spans to their sender
// (senderTrust.ts), hand the accepted ones to correlation, record and
// forward the body. The transports only translate the verdict into their
// status codes. Nothing a client sends can throw out of here.
import type { AgentMetrics, SpanRejectReason } from "../../sinks/metrics.ts";
import { type IndexedSpan, type SpanProcess, toIndexedSpans } from "./indexedSpans.ts";
import { createOtlpForwarder, type OtlpForwarder } from "./otlpForwarder.ts";
import { decodeJsonTraceRequest } from "./otlpJson.ts";
import { decodeProtobufTraceRequest, type PartialSuccess } from "./otlpProtobuf.ts";
import type { WireRequest } from "./otlpWire.ts";
import { attributeSender, identifySender, type SenderDirectory, type SenderRejectReason, type SenderVerdict } from "./senderTrust.ts";

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

export interface SpanIntakeOptions {
  metrics: AgentMetrics;
  /** Takes the accepted spans of one request; false means the intake queue is full. */
  onSpans: (spans: IndexedSpan[], peer: { address: string }) => boolean;
  /** This node's pods by address (Kubernetes mode); null outside it, where resources are taken as sent. */
  senders?: () => SenderDirectory | null;
  /** Every accepted body, decoded, for `--record` (replay decodes it with decodeTraceBody). */
  onAccepted?: (batch: { body: Uint8Array; contentType: string; peer: string }) => void;
  /** Upstream OTLP/HTTP traces URL every accepted request is passed on to, byte for byte. */
  forwardUrl?: string;
}

export interface IntakeBody {
  mediaType: MediaType;
  /** After Content-Encoding / grpc-encoding: what is decoded. */
  decoded: Uint8Array;
  /** What is forwarded: the body as sent, with its headers. */
  forward: { body: Buffer; contentType: string; contentEncoding: string | null };
  /** The remote address of the request's connection. */
  peer: string | null;
}

export type IntakeVerdict =
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
  take(body: IntakeBody): IntakeVerdict {
    const verdict = this.#judge(body);
    if (!verdict.ok) this.reject(verdict.reason);
    else if (verdict.partial !== null) this.reject(verdict.partial.reason);
    return verdict;
  }

  #judge(body: IntakeBody): IntakeVerdict {
    let claimed: IndexedSpan[];
    try {
      claimed = toIndexedSpans(MEDIA_TYPES[body.mediaType](body.decoded), body.peer);
    } catch (err) {
      return { ok: false, reason: "malformed", detail: `malformed OTLP ${body.mediaType}: ${describe(err)}` };
    }
    const directory = this.#opts.senders?.() ?? null;
    // One verdict per resource: its spans share one process object.
    const verdicts = new Map<SpanProcess, SenderVerdict>();
    const accepted: IndexedSpan[] = [];
    let rejected = 0;
    let firstRefusal: Extract<SenderVerdict, { ok: false }> | null = null;
    for (const span of claimed) {
      let verdict = verdicts.get(span.process);
      if (verdict === undefined) {
        verdict = attributeSender(span.process, directory);
        verdicts.set(span.process, verdict);
      }
      if (verdict.ok) {
        accepted.push(verdict.process === span.process ? span : { ...span, process: verdict.process });
      } else {
        rejected++;
        firstRefusal ??= verdict;
      }
    }
    if (firstRefusal !== null && accepted.length === 0) return { ok: false, reason: firstRefusal.reason, detail: firstRefusal.detail };
    const peer = body.peer ?? "";
    if (accepted.length > 0 && !this.#opts.onSpans(accepted, { address: peer })) {
      return { ok: false, reason: "queue_full", detail: "span intake queue full" };
    }
    this.#opts.metrics.spansReceived.inc(accepted.length);
    this.#opts.onAccepted?.({ body: body.decoded, contentType: body.mediaType, peer });
    this.#forwarder?.enqueue(body.forward);
    const partial =
      firstRefusal === null
        ? null
        : { reason: firstRefusal.reason, rejectedSpans: rejected, errorMessage: `${rejected} span(s) refused: ${firstRefusal.detail}` };
    return { ok: true, accepted: accepted.length, partial };
  }

  /** Sends what the forwarder holds (bounded by its timeout), then stops. */
  async close(): Promise<void> {
    await this.#forwarder?.close();
  }
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
