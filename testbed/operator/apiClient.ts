// The operator's client for apiserver requests made while reconciling, shaped
// like client-go's transport: ONE long-lived HTTP/2 connection, opened on
// first use and reused by every request (each request is a stream on it). It
// is replaced only when it dies (GOAWAY, reset, close), so a connection-level
// fault fails every request in flight on it, and the next request reconnects.
// This is what the kernel probes see from client-go: a socket opened long
// before the failure, written to many times.
//
// Every request gets an OpenTelemetry CLIENT span (HTTP semantic conventions)
// as a child of the caller's context, and a `traceparent` header.
import http2 from "node:http2";
import { context, propagation, SpanKind, SpanStatusCode, trace, type Context, type Tracer } from "@opentelemetry/api";

interface ApiClientOptions {
  /** https://host:port */
  server: string;
  ca?: string | Buffer;
  cert?: string | Buffer;
  key?: string | Buffer;
  /** Extra headers for every request (Authorization from the kubeconfig). */
  headers?: Record<string, string>;
  tracer: Tracer;
  requestTimeoutMs?: number;
  /** Like client-go: a 429 whose Status says when to come back is waited out and sent again, this many times (default 0). */
  throttleRetries?: number;
}

/** An HTTP answer outside 2xx, with the Kubernetes Status reason when there is one. */
class HttpStatusError extends Error {
  readonly status: number;
  readonly reason: string | undefined;
  /** The answer's body (a Kubernetes Status). */
  readonly body: unknown;
  constructor(status: number, body: unknown) {
    const statusBody = typeof body === "object" && body !== null ? (body as { message?: unknown; reason?: unknown }) : {};
    super(`apiserver answered ${status}${typeof statusBody.message === "string" ? `: ${statusBody.message}` : ""}`);
    this.status = status;
    this.reason = typeof statusBody.reason === "string" ? statusBody.reason : undefined;
    this.body = body;
  }
}

interface ApiResponse {
  status: number;
  body: unknown;
}

function errorType(error: unknown): string {
  if (error instanceof HttpStatusError) return String(error.status);
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" ? code : error instanceof Error ? error.name : "_OTHER";
}

/** details.retryAfterSeconds of a Kubernetes Status body, in ms; null when it says nothing. */
function retryAfterMs(body: unknown): number | null {
  const seconds = (body as { details?: { retryAfterSeconds?: unknown } } | null)?.details?.retryAfterSeconds;
  return typeof seconds === "number" && seconds > 0 ? seconds * 1000 : null;
}

export class ApiClient {
  private readonly opts: ApiClientOptions;
  private readonly origin: URL;
  private session: http2.ClientHttp2Session | undefined;
  /** Connections opened so far: 1 for a healthy run, +1 per connection lost. */
  connectionsOpened = 0;

  constructor(opts: ApiClientOptions) {
    this.opts = opts;
    this.origin = new URL(opts.server);
  }

  private connection(): http2.ClientHttp2Session {
    if (this.session && !this.session.closed && !this.session.destroyed) return this.session;
    const session = http2.connect(this.origin, { ca: this.opts.ca, cert: this.opts.cert, key: this.opts.key });
    this.connectionsOpened += 1;
    const forget = (): void => { if (this.session === session) this.session = undefined; };
    session.on("error", forget);
    session.on("close", forget);
    session.on("goaway", forget);
    this.session = session;
    return session;
  }

  /** One request, each try its own span; rejects with HttpStatusError for non-2xx answers and with the transport error otherwise. */
  async request(method: string, path: string, body: unknown, contentType: string, parent: Context = context.active()): Promise<ApiResponse> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.attempt(method, path, body, contentType, parent);
      } catch (error) {
        const waitMs = error instanceof HttpStatusError && error.status === 429 ? retryAfterMs(error.body) : null;
        if (waitMs === null || attempt >= (this.opts.throttleRetries ?? 0)) throw error;
        await new Promise((resolve) => setTimeout(resolve, waitMs));
      }
    }
  }

  private async attempt(method: string, path: string, body: unknown, contentType: string, parent: Context): Promise<ApiResponse> {
    const url = new URL(path, this.origin);
    const port = Number(url.port || 443);
    const span = this.opts.tracer.startSpan(method, {
      kind: SpanKind.CLIENT,
      attributes: {
        "http.request.method": method, "url.path": url.pathname, "url.full": url.href,
        "server.address": url.hostname.replace(/^\[|\]$/g, ""), "server.port": port, "network.protocol.version": "2",
      },
    }, parent);
    const spanContext = trace.setSpan(parent, span);
    try {
      const response = await this.send(method, url, body, contentType, spanContext);
      span.setAttribute("http.response.status_code", response.status);
      if (response.status >= 400) throw new HttpStatusError(response.status, response.body);
      return response;
    } catch (error) {
      span.setAttribute("error.type", errorType(error));
      span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error).message });
      throw error;
    } finally {
      span.end();
    }
  }

  private send(method: string, url: URL, body: unknown, contentType: string, spanContext: Context): Promise<ApiResponse> {
    const headers: http2.OutgoingHttpHeaders = {
      ":method": method, ":path": url.pathname + url.search, accept: "application/json",
      "user-agent": "lostwrite-testbed-operator", ...this.opts.headers,
    };
    propagation.inject(spanContext, headers);
    const payload = body === undefined ? undefined : JSON.stringify(body);
    if (payload !== undefined) headers["content-type"] = contentType;
    return new Promise((resolve, reject) => {
      let stream: http2.ClientHttp2Stream;
      try {
        stream = this.connection().request(headers);
      } catch (error) {
        reject(error instanceof Error ? error : new Error(String(error)));
        return;
      }
      const chunks: Buffer[] = [];
      let status = 0;
      stream.setTimeout(this.opts.requestTimeoutMs ?? 10_000, () => stream.close(http2.constants.NGHTTP2_CANCEL));
      stream.on("response", (responseHeaders) => { status = Number(responseHeaders[":status"]); });
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.on("end", () => {
        // A stream that ends without response headers died with its connection.
        if (status === 0) return;
        const text = Buffer.concat(chunks).toString("utf8");
        let parsed: unknown = text;
        try {
          parsed = text === "" ? undefined : JSON.parse(text);
        } catch {
          // Not JSON: keep the text.
        }
        resolve({ status, body: parsed });
      });
      stream.on("error", reject);
      stream.on("close", () => {
        if (status === 0) {
          const error = Object.assign(new Error(`stream closed before a response (rst code ${stream.rstCode ?? "none"})`), { code: "ERR_HTTP2_STREAM_CLOSED_UNANSWERED" });
          reject(error);
        }
      });
      stream.end(payload);
    });
  }

  close(): void {
    this.session?.close();
    this.session = undefined;
  }
}
