// OTLP/HTTP trace receiver: operators on the node send their spans here
// (POST /v1/traces, protobuf or JSON, optionally gzip). Everything about a
// request is untrusted: it is bounded, validated, judged by its sender
// (spanIntake.ts), answered with the status code OTLP exporters understand
// (400, 403, 413, 415, 429 and 503 with Retry-After) and counted in
// lostwrite_spans_rejected_total; nothing a client sends can throw out of here.
import type { IncomingMessage, ServerResponse } from "node:http";
import http from "../../nodeHttp.ts";
import type { AddressInfo, Socket } from "node:net";
import { readBoundedBody } from "./boundedBody.ts";
import { encodeProtobufTraceResponse, type PartialSuccess } from "./otlpProtobuf.ts";
import { isMediaType, type MediaType, type SpanIntake } from "./spanIntake.ts";
import { parseHostPort } from "../../hostPort.ts";
import type { SpanRejectReason } from "../../telemetry/metrics.ts";

interface OtlpReceiverOptions {
  /** host:port ("[::1]:4318" for IPv6); port 0 picks a free one. */
  listen: string;
  /** Limit on the body, both as sent and after decompression. */
  maxBodyBytes: number;
  /** Judges, counts, hands on and forwards what was read (shared with the gRPC receiver). */
  intake: SpanIntake;
  /** Requests read and decoded at once; more are answered 429. Bounds memory to about this × maxBodyBytes. */
  maxConcurrentRequests?: number;
  /** Seconds a client is told to wait after a 429. */
  retryAfterSeconds?: number;
}

export interface OtlpReceiver {
  address: { host: string; port: number };
  close(): Promise<void>;
}

const PATH = "/v1/traces";
/** The status a refusal is answered with: 429 is the one OTLP exporters retry. */
const STATUS: Record<SpanRejectReason, number> = {
  malformed: 400,
  unsupported_media_type: 415,
  too_large: 413,
  queue_full: 429,
  method_not_allowed: 405,
  unknown_sender: 403,
  sender_mismatch: 403,
  // Retried by exporters: the pod list is on its way.
  senders_not_listed: 503,
};

/** The success body of each media type; a partial success names the spans refused. */
function successBody(mediaType: MediaType, partial: PartialSuccess | null): Buffer {
  if (mediaType === "application/x-protobuf") return Buffer.from(encodeProtobufTraceResponse(partial));
  if (partial === null) return Buffer.from("{}");
  // OTLP/JSON: int64 as a decimal string, as the protobuf JSON mapping has it.
  return Buffer.from(JSON.stringify({ partialSuccess: { rejectedSpans: String(partial.rejectedSpans), errorMessage: partial.errorMessage } }));
}

export async function startOtlpReceiver(opts: OtlpReceiverOptions): Promise<OtlpReceiver> {
  const { host, port } = parseHostPort(opts.listen, "otlpListen");
  if (!(Number.isSafeInteger(opts.maxBodyBytes) && opts.maxBodyBytes > 0)) {
    throw new Error(`otlp maxBodyBytes: expected a positive integer, got ${opts.maxBodyBytes}`);
  }
  const { intake } = opts;
  const maxConcurrent = opts.maxConcurrentRequests ?? 8;
  const retryAfter = String(opts.retryAfterSeconds ?? 2);
  let inFlight = 0;

  const reject = (res: ServerResponse, reason: SpanRejectReason, detail: string, counted = false): void => {
    if (!counted) intake.reject(reason);
    const status = STATUS[reason];
    const headers: Record<string, string> = { "content-type": "text/plain; charset=utf-8" };
    if (status === 429 || status === 503) headers["retry-after"] = retryAfter;
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
      reject(res, "method_not_allowed", `${req.method} not allowed on ${PATH}`);
      req.resume();
      return;
    }
    const mediaType = (req.headers["content-type"] ?? "").split(";", 1)[0]?.trim().toLowerCase() ?? "";
    if (!isMediaType(mediaType)) {
      reject(res, "unsupported_media_type", `unsupported content-type "${mediaType}"`);
      req.resume();
      return;
    }
    const encoding = (req.headers["content-encoding"] ?? "identity").trim().toLowerCase();
    if (encoding !== "gzip" && encoding !== "identity") {
      reject(res, "unsupported_media_type", `unsupported content-encoding "${encoding}"`);
      req.resume();
      return;
    }
    const declared = Number(req.headers["content-length"] ?? "0");
    if (declared > opts.maxBodyBytes) {
      reject(res, "too_large", `body of ${declared} bytes exceeds ${opts.maxBodyBytes}`);
      req.resume();
      return;
    }
    const stranger = intake.screen(req.socket.remoteAddress ?? null);
    if (stranger !== null) {
      reject(res, stranger.reason, stranger.detail, true);
      req.resume();
      return;
    }
    if (inFlight >= maxConcurrent) {
      reject(res, "queue_full", "too many concurrent requests");
      req.resume();
      return;
    }
    inFlight++;
    try {
      const body = await readBoundedBody(req, opts.maxBodyBytes, encoding === "gzip");
      if (!body.ok) {
        reject(res, body.reason, body.detail);
        return;
      }
      const verdict = await intake.take({
        mediaType,
        decoded: body.decoded,
        forward: {
          body: body.raw,
          contentType: req.headers["content-type"] ?? mediaType,
          contentEncoding: req.headers["content-encoding"] ?? null,
        },
        peer: req.socket.remoteAddress ?? null,
        peerPort: req.socket.remotePort ?? null,
      });
      if (!verdict.ok) {
        reject(res, verdict.reason, verdict.detail, true);
        return;
      }
      res.writeHead(200, { "content-type": mediaType }).end(successBody(mediaType, verdict.partial));
    } finally {
      inFlight--;
    }
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      // Only a bug of ours gets here; answer and keep serving.
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
      process.emitWarning(`otlp receiver: ${describe(err)}`);
    });
  });
  // Each connection's sender is looked up once, when it first sends.
  server.on("connection", (socket: Socket) => intake.track(socket));
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
    },
  };
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
