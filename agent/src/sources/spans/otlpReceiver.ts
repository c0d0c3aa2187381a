// OTLP/HTTP trace receiver: operators on the node send their spans here
// (POST /v1/traces, protobuf or JSON, optionally gzip). Everything about a
// request is untrusted: it is bounded, validated, answered with the status
// code OTLP exporters understand (400, 413, 415, 429 + Retry-After) and
// counted in lostwrite_spans_rejected_total; nothing a client sends can
// throw out of here.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { AgentMetrics } from "../../sinks/metrics.ts";
import { readBoundedBody } from "./boundedBody.ts";
import { type IndexedSpan, toIndexedSpans } from "./indexedSpans.ts";
import { createOtlpForwarder, type OtlpForwarder } from "./otlpForwarder.ts";
import { decodeJsonTraceRequest } from "./otlpJson.ts";
import { decodeProtobufTraceRequest } from "./otlpProtobuf.ts";
import type { WireRequest } from "./otlpWire.ts";
import { parseHostPort } from "../../hostPort.ts";

export interface OtlpReceiverOptions {
  /** host:port ("[::1]:4318" for IPv6); port 0 picks a free one. */
  listen: string;
  /** Limit on the body, both as sent and after decompression. */
  maxBodyBytes: number;
  /** Upstream OTLP/HTTP traces URL every accepted batch is passed on to. */
  forwardUrl?: string;
  metrics: AgentMetrics;
  /** Takes the spans of one request; false means the intake queue is full (answered 429). */
  onSpans: (spans: IndexedSpan[], peer: { address: string }) => boolean;
  /** Every accepted body, decompressed, for `--record` (replay decodes it with decodeTraceBody). */
  onAccepted?: (batch: { body: Uint8Array; contentType: string; peer: string }) => void;
  /** Requests read and decoded at once; more are answered 429. Bounds memory to about this × maxBodyBytes. */
  maxConcurrentRequests?: number;
  /** Seconds a client is told to wait after a 429. */
  retryAfterSeconds?: number;
}

export interface OtlpReceiver {
  address: { host: string; port: number };
  close(): Promise<void>;
}

type RejectReason = "malformed" | "unsupported_media_type" | "too_large" | "queue_full" | "method_not_allowed";

const PATH = "/v1/traces";
const MEDIA_TYPES = {
  "application/x-protobuf": { decode: decodeProtobufTraceRequest, reply: Buffer.alloc(0) },
  "application/json": { decode: decodeJsonTraceRequest, reply: Buffer.from("{}") },
} as const satisfies Record<string, { decode: (body: Uint8Array) => WireRequest; reply: Buffer }>;
type MediaType = keyof typeof MEDIA_TYPES;

/** Decodes one OTLP/HTTP traces body of a supported media type; throws on malformed input. */
export function decodeTraceBody(mediaType: string, body: Uint8Array, peerAddress: string | null): IndexedSpan[] {
  if (!(mediaType in MEDIA_TYPES)) throw new Error(`unsupported media type "${mediaType}"`);
  return toIndexedSpans(MEDIA_TYPES[mediaType as MediaType].decode(body), peerAddress);
}

export async function startOtlpReceiver(opts: OtlpReceiverOptions): Promise<OtlpReceiver> {
  const { host, port } = parseHostPort(opts.listen, "otlpListen");
  if (!(Number.isSafeInteger(opts.maxBodyBytes) && opts.maxBodyBytes > 0)) {
    throw new Error(`otlp maxBodyBytes: expected a positive integer, got ${opts.maxBodyBytes}`);
  }
  const { metrics } = opts;
  const maxConcurrent = opts.maxConcurrentRequests ?? 8;
  const retryAfter = String(opts.retryAfterSeconds ?? 2);
  const forwarder: OtlpForwarder | null =
    opts.forwardUrl !== undefined ? createOtlpForwarder({ url: opts.forwardUrl, metrics }) : null;
  let inFlight = 0;

  const reject = (res: ServerResponse, status: number, reason: RejectReason, detail: string): void => {
    metrics.spansRejected.inc({ reason });
    const headers: Record<string, string> = { "content-type": "text/plain; charset=utf-8" };
    if (status === 429) headers["retry-after"] = retryAfter;
    // The rest of an oversized body is not worth reading: end the connection.
    if (status === 413) headers.connection = "close";
    res.writeHead(status, headers).end(`${detail}\n`);
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "").split("?", 1)[0];
    if (path !== PATH) {
      res.writeHead(404, { "content-type": "text/plain; charset=utf-8" }).end("not found\n");
      req.resume();
      return;
    }
    if (req.method !== "POST") {
      res.setHeader("allow", "POST");
      reject(res, 405, "method_not_allowed", `${req.method} not allowed on ${PATH}`);
      req.resume();
      return;
    }
    const mediaType = (req.headers["content-type"] ?? "").split(";", 1)[0]?.trim().toLowerCase() ?? "";
    if (!(mediaType in MEDIA_TYPES)) {
      reject(res, 415, "unsupported_media_type", `unsupported content-type "${mediaType}"`);
      req.resume();
      return;
    }
    const encoding = (req.headers["content-encoding"] ?? "identity").trim().toLowerCase();
    if (encoding !== "gzip" && encoding !== "identity") {
      reject(res, 415, "unsupported_media_type", `unsupported content-encoding "${encoding}"`);
      req.resume();
      return;
    }
    const declared = Number(req.headers["content-length"] ?? "0");
    if (declared > opts.maxBodyBytes) {
      reject(res, 413, "too_large", `body of ${declared} bytes exceeds ${opts.maxBodyBytes}`);
      req.resume();
      return;
    }
    if (inFlight >= maxConcurrent) {
      reject(res, 429, "queue_full", "too many concurrent requests");
      req.resume();
      return;
    }
    inFlight++;
    try {
      const body = await readBoundedBody(req, opts.maxBodyBytes, encoding === "gzip");
      if (!body.ok) {
        reject(res, body.reason === "too_large" ? 413 : 400, body.reason, body.detail);
        return;
      }
      const media = MEDIA_TYPES[mediaType as MediaType];
      let spans: IndexedSpan[];
      try {
        spans = decodeTraceBody(mediaType, body.decoded, req.socket.remoteAddress ?? null);
      } catch (err) {
        reject(res, 400, "malformed", `malformed OTLP ${mediaType}: ${describe(err)}`);
        return;
      }
      if (spans.length > 0 && !opts.onSpans(spans, { address: req.socket.remoteAddress ?? "" })) {
        reject(res, 429, "queue_full", "span intake queue full");
        return;
      }
      metrics.spansReceived.inc(spans.length);
      opts.onAccepted?.({ body: body.decoded, contentType: mediaType, peer: req.socket.remoteAddress ?? "" });
      forwarder?.enqueue({
        body: body.raw,
        contentType: req.headers["content-type"] ?? mediaType,
        contentEncoding: req.headers["content-encoding"] ?? null,
      });
      res.writeHead(200, { "content-type": mediaType }).end(media.reply);
    } finally {
      inFlight--;
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      // Only a bug of ours gets here; answer and keep serving.
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
      process.emitWarning(`otlp receiver: ${describe(err)}`);
    });
  });
  // Slow or silent clients must not hold a request slot for ever.
  server.requestTimeout = 30_000;
  server.headersTimeout = 10_000;
  server.on("clientError", (_err, socket) => {
    if (socket.writable) socket.end("HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n");
    else socket.destroy();
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;

  return {
    address: { host: addr.address, port: addr.port },
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await forwarder?.close();
    },
  };
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
