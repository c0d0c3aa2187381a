// The HTTP side of the apiserver: one handler for HTTP/1.1 and HTTP/2
// requests (node's compatibility API gives both the same shape). It asks the
// fault rules first, then serves the Kubernetes API, streaming watches.
import type http from "node:http";
import http2 from "node:http2";
import { connectionOf, type Connection } from "./connections.ts";
import type { FaultControl, FaultRecord } from "./faults.ts";
import { resourceKey } from "./resources.ts";
import { objectMatches, serveApi, type WatchRequest } from "./routes.ts";
import type { Rule } from "./scenario.ts";
import { ApiError, statusBody } from "./status.ts";
import type { KubeObject, ObjectStore, StoreEvent } from "./store.ts";

type Request = http.IncomingMessage | http2.Http2ServerRequest;
/** What both response types offer; their own union is not callable for writeHead. */
interface Response {
  readonly headersSent: boolean;
  readonly writableEnded: boolean;
  readonly writableLength: number;
  readonly destroyed: boolean;
  writeHead(status: number, headers: Record<string, string>): unknown;
  write(chunk: string): boolean;
  end(chunk?: string): unknown;
  on(event: "close", listener: () => void): unknown;
}

const BODY_LIMIT = 3 * 1024 * 1024;
/** A watcher that lets this much pile up unsent is cut off, as a real apiserver drops slow watchers. */
const WATCH_BACKLOG_LIMIT = 8 * 1024 * 1024;
const BOOKMARK_INTERVAL_MS = 5_000;

interface HandlerDeps {
  store: ObjectStore;
  faults: FaultControl;
}

interface RequestContext {
  req: Request;
  res: Response;
  method: string;
  path: string;
  conn: Connection | undefined;
  streamId: number | null;
}

function contextOf(req: Request, res: Response): RequestContext {
  const url = new URL(req.url ?? "/", "https://apiserver");
  const isH2 = "stream" in req;
  const conn = connectionOf(isH2 ? req.stream.session?.socket : req.socket);
  return { req, res, method: (req.method ?? "GET").toUpperCase(), path: url.pathname, conn, streamId: isH2 ? (req.stream.id ?? null) : null };
}

/** Reads the request body; with `stopAt`, resolves as soon as that many bytes arrived (and stops reading). */
function readBody(req: Request, stopAt?: number): Promise<{ body: Buffer; bytes: number; complete: boolean }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let bytes = 0;
    let done = false;
    const finish = (complete: boolean): void => {
      if (done) return;
      done = true;
      req.off("data", onData);
      resolve({ body: Buffer.concat(chunks), bytes, complete });
    };
    const onData = (chunk: Buffer): void => {
      bytes += chunk.length;
      if (bytes <= BODY_LIMIT) chunks.push(chunk);
      if (stopAt !== undefined && bytes >= stopAt) {
        req.pause();
        finish(false);
      }
    };
    if (stopAt === 0) {
      finish(false);
      return;
    }
    req.on("data", onData);
    req.once("end", () => finish(true));
    req.once("error", (error: Error) => { if (!done) { done = true; reject(error); } });
    req.once("close", () => finish(false));
  });
}

function sendJson(res: Response, status: number, body: unknown, extraHeaders: Record<string, string> = {}): void {
  if (res.headersSent || res.writableEnded || res.destroyed) return;
  const text = typeof body === "string" ? body : JSON.stringify(body);
  res.writeHead(status, {
    "content-type": typeof body === "string" ? "text/plain; charset=utf-8" : "application/json",
    "cache-control": "no-cache, private",
    "content-length": String(Buffer.byteLength(text)),
    ...extraHeaders,
  });
  res.end(text);
}

function sendError(res: Response, error: unknown): void {
  if (error instanceof ApiError) sendJson(res, error.code, error.toStatus());
  else sendJson(res, 500, statusBody(500, `internal error: ${(error as Error).message}`));
}

function parseBody(body: Buffer, method: string): unknown {
  if (method === "GET" || method === "DELETE" || body.length === 0) return undefined;
  if (body.length > BODY_LIMIT) throw new ApiError(413, `request body larger than ${BODY_LIMIT} bytes`, undefined, "RequestEntityTooLarge");
  try {
    return JSON.parse(body.toString("utf8"));
  } catch (error) {
    throw new ApiError(400, `the request body is not valid JSON: ${(error as Error).message}`);
  }
}

function streamWatch(store: ObjectStore, watch: WatchRequest, ctx: RequestContext): void {
  const { res } = ctx;
  const key = resourceKey(watch.def);
  res.writeHead(200, { "content-type": "application/json", "cache-control": "no-cache, private" });
  const send = (type: string, object: unknown): void => {
    if (res.writableEnded || res.destroyed) return;
    res.write(JSON.stringify({ type, object }) + "\n");
    if (res.writableLength > WATCH_BACKLOG_LIMIT) stop();
  };
  const relevant = (event: StoreEvent): boolean =>
    event.resource === key && (watch.namespace === undefined || event.object.metadata.namespace === watch.namespace) &&
    objectMatches(event.object, watch.fields, watch.labels);

  const listed = watch.fromRevision === null ? store.list(key, watch.namespace) : null;
  const initial: KubeObject[] = listed ? listed.items.filter((object) => objectMatches(object, watch.fields, watch.labels)) : [];
  const subscription = store.subscribe(watch.fromRevision, (event) => { if (relevant(event)) send(event.type, event.object); });
  if (subscription === "expired" || subscription === "full") {
    const status = subscription === "expired"
      ? statusBody(410, `too old resource version: ${watch.fromRevision} (${store.currentRevision()})`, "Expired")
      : statusBody(429, "too many watches open on the testbed apiserver", "TooManyRequests");
    send("ERROR", status);
    res.end();
    return;
  }
  const { unsubscribe, backlog } = subscription;
  let stopped = false;
  const timers: NodeJS.Timeout[] = [];
  function stop(): void {
    if (stopped) return;
    stopped = true;
    unsubscribe();
    for (const timer of timers) clearTimeout(timer);
    if (!res.writableEnded) res.end();
  }
  res.on("close", stop);
  const bookmark = (metadata: { resourceVersion: string; annotations?: Record<string, string> }): unknown => ({
    kind: watch.def.kind, apiVersion: watch.def.group === "" ? watch.def.version : `${watch.def.group}/${watch.def.version}`, metadata,
  });
  for (const object of initial) send("ADDED", object);
  if (listed && watch.initialEvents && watch.bookmarks) {
    send("BOOKMARK", bookmark({ resourceVersion: listed.resourceVersion, annotations: { "k8s.io/initial-events-end": "true" } }));
  }
  for (const event of backlog) if (relevant(event)) send(event.type, event.object);
  if (watch.timeoutSeconds !== null && watch.timeoutSeconds > 0) timers.push(setTimeout(stop, watch.timeoutSeconds * 1000));
  if (watch.bookmarks) {
    timers.push(setInterval(() => send("BOOKMARK", bookmark({ resourceVersion: String(store.currentRevision()) })), BOOKMARK_INTERVAL_MS));
  }
}

async function serveNormally(deps: HandlerDeps, ctx: RequestContext, alreadyRead?: Buffer): Promise<void> {
  const { req, res } = ctx;
  const body = alreadyRead ?? (await readBody(req)).body;
  const query = new URL(req.url ?? "/", "https://apiserver").searchParams;
  const answer = serveApi(deps.store, {
    method: ctx.method, path: ctx.path, query, accept: req.headers.accept, contentType: req.headers["content-type"],
    body: parseBody(body, ctx.method),
  });
  if (answer.kind === "watch") streamWatch(deps.store, answer.watch, ctx);
  else sendJson(res, answer.status, answer.body);
}

function record(deps: HandlerDeps, ctx: RequestContext, rule: Rule & { id: string }, detail: string, bytesRead: number | null): FaultRecord {
  const info = ctx.conn?.info();
  return deps.faults.record({
    rule: rule.id, action: rule.action, detail, method: ctx.method, path: ctx.path,
    protocol: info?.protocol ?? null, streamId: ctx.streamId,
    connection: info ? { id: info.id, client: info.client, server: info.server } : null,
    bytesRead, expect: rule.expect ?? null,
  });
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Does what the rule says to this request; resolves once the request is answered or killed. */
async function inject(deps: HandlerDeps, ctx: RequestContext, rule: Rule & { id: string }): Promise<void> {
  switch (rule.action) {
    case "reset": {
      const { bytes } = await readBody(ctx.req, rule.afterBytes);
      record(deps, ctx, rule, `RST after ${bytes} request body byte(s)`, bytes);
      ctx.conn?.reset();
      return;
    }
    case "close": {
      const { bytes } = await readBody(ctx.req);
      record(deps, ctx, rule, "whole request read, connection closed (FIN) without an answer", bytes);
      ctx.conn?.closeUnanswered();
      return;
    }
    case "refuse": {
      const info = ctx.conn?.info();
      deps.faults.refuseNow(rule.for, rule.existing, {
        rule: rule.id, method: ctx.method, path: ctx.path, protocol: info?.protocol ?? null, streamId: ctx.streamId,
        connection: info ? { id: info.id, client: info.client, server: info.server } : null, expect: rule.expect ?? null,
      });
      // A kept connection serves the triggering request normally; otherwise it died with the others.
      if (rule.existing === "keep") await serveNormally(deps, ctx);
      return;
    }
    case "status": {
      const { bytes } = await readBody(ctx.req);
      record(deps, ctx, rule, `answered ${rule.code}`, bytes);
      const message = rule.message ?? `fault injected by testbed rule ${rule.id}`;
      const details = rule.retryAfterSeconds === undefined ? undefined : { retryAfterSeconds: rule.retryAfterSeconds };
      sendJson(ctx.res, rule.code, statusBody(rule.code, message, undefined, details),
        rule.retryAfterSeconds === undefined ? {} : { "retry-after": String(rule.retryAfterSeconds) });
      return;
    }
    case "goaway": {
      const { bytes } = await readBody(ctx.req);
      if (!("stream" in ctx.req) || ctx.streamId === null) {
        record(deps, ctx, rule, "HTTP/1.1 has no GOAWAY: connection closed without an answer", bytes);
        ctx.conn?.closeUnanswered();
        return;
      }
      const { stream } = ctx.req;
      const lastStreamId = Math.max(0, ctx.streamId - 2);
      record(deps, ctx, rule, `GOAWAY with last stream id ${lastStreamId}: this stream was never processed`, bytes);
      stream.session?.goaway(http2.constants.NGHTTP2_NO_ERROR, lastStreamId);
      stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
      stream.session?.close();
      return;
    }
    case "rst_stream": {
      const { bytes } = await readBody(ctx.req);
      if (!("stream" in ctx.req) || ctx.streamId === null) {
        record(deps, ctx, rule, "HTTP/1.1 has no streams: connection reset", bytes);
        ctx.conn?.reset();
        return;
      }
      record(deps, ctx, rule, `RST_STREAM with error code ${rule.code}; the connection lives on`, bytes);
      ctx.req.stream.close(rule.code);
      return;
    }
    case "delay": {
      record(deps, ctx, rule, `answer delayed by ${rule.for} ms`, null);
      await sleep(rule.for);
      await serveNormally(deps, ctx);
      return;
    }
    case "stall": {
      const conn = ctx.conn;
      record(deps, ctx, rule, rule.for === undefined ? "stopped reading until the client gives up" : `stopped reading for ${rule.for} ms`, null);
      if (!conn) return;
      conn.stall();
      if (rule.for === undefined) return;
      await sleep(rule.for);
      conn.resume();
      await serveNormally(deps, ctx);
      return;
    }
  }
}

export function createRequestHandler(deps: HandlerDeps): (req: Request, res: http.ServerResponse | http2.Http2ServerResponse) => void {
  return (req, nodeRes) => {
    const res = nodeRes as unknown as Response;
    const ctx = contextOf(req, res);
    const rule = ctx.path.startsWith("/healthz") ? undefined : deps.faults.match({ method: ctx.method, path: ctx.path });
    const work = rule ? inject(deps, ctx, rule) : serveNormally(deps, ctx);
    work.catch((error: unknown) => sendError(res, error));
  };
}
