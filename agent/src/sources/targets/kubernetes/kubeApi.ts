// The two requests the agent makes of the apiserver: a list, answered with
// one JSON object, and a watch, answered with one JSON event a line until the
// server ends it. Plain node:https with the access apiAccess.ts read; every
// answer is bounded (an object of etcd's limit fits many times), and an
// answer that is not 200 becomes an error carrying its status code and the
// apiserver's own message.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import type * as Https from "node:https";
import type { Agent, ClientRequest, IncomingMessage } from "node:http";
import http from "../../../nodeHttp.ts";
import { AGENT_VERSION } from "../../../version.ts";
import { readBoundedBody } from "../../spans/boundedBody.ts";
import type { ApiAccess } from "./apiAccess.ts";

// Loaded like node:http (nodeHttp.ts says why require()).
const https = createRequire(import.meta.url)("node:https") as typeof Https;

/** A list's whole answer, at most. */
const MAX_LIST_BYTES = 64 * 1024 * 1024;
/** One watch event, at most (etcd stores objects up to 1.5 MiB). */
const MAX_EVENT_BYTES = 16 * 1024 * 1024;
/** An error answer's body, at most: only its message is read. */
const MAX_ERROR_BYTES = 64 * 1024;

/** A request the apiserver answered with another status than 200, or a stream that broke. */
export class KubernetesApiError extends Error {
  /** The HTTP status, or null when there was no answer. */
  readonly statusCode: number | null;
  constructor(message: string, statusCode: number | null) {
    super(message);
    this.name = "KubernetesApiError";
    this.statusCode = statusCode;
  }
}

type Query = Record<string, string | undefined>;

export class KubernetesApi {
  readonly #access: ApiAccess;
  readonly #base: URL;
  readonly #agent: Agent;
  readonly #request: typeof http.request;

  constructor(access: ApiAccess) {
    this.#access = access;
    this.#base = new URL(access.server);
    if (this.#base.protocol === "https:") {
      this.#agent = new https.Agent({
        keepAlive: true,
        ...(access.ca ? { ca: access.ca } : {}),
        ...(access.cert && access.key ? { cert: access.cert, key: access.key } : {}),
        ...(access.tlsServerName ? { servername: access.tlsServerName } : {}),
        rejectUnauthorized: access.insecureSkipTlsVerify !== true,
      });
      this.#request = https.request;
    } else if (this.#base.protocol === "http:") {
      this.#agent = new http.Agent({ keepAlive: true });
      this.#request = http.request;
    } else {
      throw new Error(`${access.source}: server ${JSON.stringify(access.server)} is neither https:// nor http://`);
    }
  }

  /** The server URL requests go to. */
  get server(): string {
    return this.#access.server;
  }

  /** GET `path` and its JSON answer. */
  async get(path: string, query: Query, signal: AbortSignal): Promise<unknown> {
    const what = `GET ${path}`;
    const res = await this.#send(path, query, signal);
    const body = await readBounded(res, MAX_LIST_BYTES, what);
    try {
      return JSON.parse(body) as unknown;
    } catch {
      throw new KubernetesApiError(`${what}: the answer is not JSON`, 200);
    }
  }

  /**
   * A watch on `path`: `onAnswered` is called once the server accepted it,
   * then `onEvent` gets each event as parsed JSON, in order. Resolves when
   * the server ends the stream; rejects when it breaks, a line is not JSON,
   * or one grows past its bound.
   */
  async watch(path: string, query: Query, signal: AbortSignal, onAnswered: () => void, onEvent: (event: unknown) => void): Promise<void> {
    const what = `watch ${path}`;
    const res = await this.#send(path, { ...query, watch: "true" }, signal);
    onAnswered();
    res.setEncoding("utf8");
    let pending = "";
    for await (const chunk of res as AsyncIterable<string>) {
      pending += chunk;
      let newline: number;
      while ((newline = pending.indexOf("\n")) !== -1) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        if (line.trim() === "") continue;
        let event: unknown;
        try {
          event = JSON.parse(line) as unknown;
        } catch {
          throw new KubernetesApiError(`${what}: an event is not JSON: ${line.slice(0, 80)}`, 200);
        }
        onEvent(event);
      }
      if (pending.length > MAX_EVENT_BYTES) {
        res.destroy();
        throw new KubernetesApiError(`${what}: an event is over ${MAX_EVENT_BYTES} bytes`, 200);
      }
    }
  }

  /** Closes the kept-alive connections. */
  close(): void {
    this.#agent.destroy();
  }

  /** The request sent; its answer once its status is 200, else an error with the apiserver's message. */
  async #send(path: string, query: Query, signal: AbortSignal): Promise<IncomingMessage> {
    const url = new URL(this.#base.pathname.replace(/\/+$/, "") + path, this.#base);
    for (const [key, value] of Object.entries(query)) if (value !== undefined) url.searchParams.set(key, value);
    const token = this.#token();
    const headers: Record<string, string> = { Accept: "application/json", "User-Agent": `lostwrite/${AGENT_VERSION}` };
    if (token !== "") headers.Authorization = `Bearer ${token}`;
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req: ClientRequest = this.#request(url, { agent: this.#agent, headers, signal }, resolve);
      req.on("error", reject);
      req.end();
    });
    if (res.statusCode === 200) return res;
    const status = res.statusCode ?? 0;
    let message = res.statusMessage ?? "";
    try {
      // A metav1.Status says why, e.g. `pods is forbidden: User "…" cannot list …`.
      const parsed = JSON.parse(await readBounded(res, MAX_ERROR_BYTES, path)) as { message?: unknown };
      if (typeof parsed.message === "string") message = parsed.message;
    } catch {
      // Not a Status: the status line says enough.
    }
    throw new KubernetesApiError(`GET ${path}: ${status} ${message}`.trim(), status);
  }

  /** The bearer token: the file's is read at each request, as a ServiceAccount's is rotated. */
  #token(): string {
    if (this.#access.tokenFile !== undefined) return readFileSync(this.#access.tokenFile, "utf8").trim();
    return this.#access.token ?? "";
  }
}

/** The answer's body as text, at most `max` bytes; an answer that breaks or is larger is an error. */
async function readBounded(res: IncomingMessage, max: number, what: string): Promise<string> {
  const body = await readBoundedBody(res, max, false);
  if (body.ok) return body.decoded.toString("utf8");
  res.destroy();
  throw new KubernetesApiError(`${what}: ${body.detail}`, res.statusCode ?? null);
}
