// Helpers for the testbed's own tests: a server in a temp dir, and plain
// HTTP/1.1 and HTTP/2 requests that trust its CA (real sockets, no mocks).
import { mkdtemp, readFile, rm } from "node:fs/promises";
import http2 from "node:http2";
import https from "node:https";
import os from "node:os";
import path from "node:path";
import { startApiserver, type Apiserver, type ApiserverOptions } from "../apiserver.ts";

export interface TestServer extends Apiserver {
  ca: string;
  dir: string;
}

export async function startTestApiserver(opts: Partial<ApiserverOptions> = {}): Promise<TestServer> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "testbed-test-"));
  const server = await startApiserver({ ...opts, dir });
  const ca = await readFile(server.caPath, "utf8");
  return {
    ...server, ca, dir,
    close: async () => {
      await server.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
  protocol: string;
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** One HTTP/1.1 request on a fresh connection (ALPN http/1.1). */
export function h1(server: TestServer, method: string, urlPath: string, body?: unknown, contentType = "application/json"): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body);
    const req = https.request(new URL(urlPath, server.url), {
      method, ca: server.ca, agent: false,
      headers: payload === undefined ? {} : { "content-type": contentType },
    }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: parse(Buffer.concat(chunks).toString()), protocol: `HTTP/${res.httpVersion}` }));
    });
    req.on("error", reject);
    req.end(payload);
  });
}

/** One HTTP/2 request on `session` (or a fresh one, closed afterwards). */
export async function h2(server: TestServer, method: string, urlPath: string, body?: unknown, contentType = "application/json", session?: http2.ClientHttp2Session): Promise<Answer> {
  const own = session ?? http2.connect(server.url, { ca: server.ca });
  try {
    return await new Promise<Answer>((resolve, reject) => {
      const payload = body === undefined ? undefined : JSON.stringify(body);
      const stream = own.request({ ":method": method, ":path": urlPath, ...(payload === undefined ? {} : { "content-type": contentType }) });
      const chunks: Buffer[] = [];
      let status = 0;
      let headers: Record<string, string | string[] | undefined> = {};
      stream.on("response", (h) => { status = Number(h[":status"]); headers = h; });
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.on("end", () => resolve({ status, headers, body: parse(Buffer.concat(chunks).toString()), protocol: "HTTP/2" }));
      stream.on("error", reject);
      stream.end(payload);
    });
  } finally {
    if (!session) own.close();
  }
}

export const WIDGETS_PATH = "/apis/demo.lostwrite.dev/v1/namespaces/default/widgets";

export function widget(name: string, spec: Record<string, unknown> = { size: 1 }, status?: Record<string, unknown>): Record<string, unknown> {
  return { apiVersion: "demo.lostwrite.dev/v1", kind: "Widget", metadata: { name }, spec, ...(status ? { status } : {}) };
}
