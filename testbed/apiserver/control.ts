// The control API: plain HTTP/1.1 + JSON on a separate loopback port, for
// tests and the demo to add fault rules, read the fault log and fill the
// object store. Nothing here is Kubernetes API; it is the testbed's own.
//
//   GET    /healthz
//   GET    /rules                      rule states (armed, seen, fired, exhausted)
//   POST   /rules                      one rule, an array of rules, or {rules:[…]}; 201 {ids}
//   DELETE /rules, /rules/{id}
//   POST   /scenario                   a scenario document (YAML or JSON text); 201 {ids}
//   POST   /refuse                     {for, existing?}: refuse connections now
//   POST   /connections/reset|close    RST / FIN-without-answer every open connection now
//   GET    /connections                open connections
//   GET    /faults?since=SEQ           {faults, dropped}
//   GET    /faults.jsonl?since=SEQ     the same as JSON lines
//   POST   /objects                    create or replace any served object (pods, endpointslices, widgets)
//   DELETE /objects?apiVersion=&kind=&namespace=&name=
//   GET    /stats
import http from "node:http";
import { z } from "zod";
import type { Listener } from "./connections.ts";
import type { FaultControl } from "./faults.ts";
import { findByKind, resourceKey } from "./resources.ts";
import { describeIssues, parseScenario } from "./scenario.ts";
import { ApiError } from "./status.ts";
import type { ObjectStore } from "./store.ts";
import { upsertObject } from "./writes.ts";

const BODY_LIMIT = 1024 * 1024;

const refuseSchema = z.strictObject({
  for: z.union([z.number().int().positive(), z.string()]),
  existing: z.enum(["keep", "close", "reset"]).default("keep"),
});

class ControlError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

async function readText(req: http.IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > BODY_LIMIT) throw new ControlError(413, `body larger than ${BODY_LIMIT} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}

async function readJson(req: http.IncomingMessage): Promise<unknown> {
  const text = await readText(req);
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new ControlError(400, `body is not valid JSON: ${(error as Error).message}`);
  }
}

function durationMs(value: number | string): number {
  if (typeof value === "number") return value;
  const match = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(value);
  if (!match) throw new ControlError(400, `for: expected milliseconds or a duration like 2s (got ${JSON.stringify(value)})`);
  const amount = Number(match[1]);
  return Math.round(match[2] === "ms" ? amount : match[2] === "s" ? amount * 1000 : amount * 60_000);
}

interface ControlDeps {
  faults: FaultControl;
  store: ObjectStore;
  listener: Listener;
}

async function route(deps: ControlDeps, req: http.IncomingMessage, url: URL): Promise<[number, unknown]> {
  const { faults, store, listener } = deps;
  const method = req.method ?? "GET";
  const path = url.pathname;
  const since = Number(url.searchParams.get("since") ?? "0");

  if (method === "GET" && path === "/healthz") return [200, { ok: true }];
  if (method === "GET" && path === "/rules") return [200, { rules: faults.rules() }];
  if (method === "POST" && path === "/rules") {
    const body = await readJson(req);
    const list = Array.isArray(body) ? body : typeof body === "object" && body !== null && "rules" in body ? (body).rules : [body];
    if (!Array.isArray(list)) throw new ControlError(400, "rules: expected an array");
    try {
      return [201, { ids: list.map((rule) => faults.addRule(rule)) }];
    } catch (error) {
      throw new ControlError(400, (error as Error).message);
    }
  }
  if (method === "DELETE" && path === "/rules") {
    faults.clearRules();
    return [200, { ok: true }];
  }
  const ruleId = /^\/rules\/([^/]+)$/.exec(path)?.[1];
  if (method === "DELETE" && ruleId !== undefined) {
    if (!faults.removeRule(decodeURIComponent(ruleId))) throw new ControlError(404, `no fault rule with id ${JSON.stringify(ruleId)}`);
    return [200, { ok: true }];
  }
  if (method === "POST" && path === "/scenario") {
    try {
      return [201, { ids: faults.loadScenario(parseScenario(await readText(req), "scenario body")) }];
    } catch (error) {
      throw new ControlError(400, (error as Error).message);
    }
  }
  if (method === "POST" && path === "/refuse") {
    const body = await readJson(req);
    const parsed = refuseSchema.safeParse(body);
    if (!parsed.success) throw new ControlError(400, describeIssues(parsed.error, body));
    return [200, { fault: faults.refuseNow(durationMs(parsed.data.for), parsed.data.existing) }];
  }
  const drop = /^\/connections\/(reset|close)$/.exec(path)?.[1];
  if (method === "POST" && (drop === "reset" || drop === "close")) return [200, { faults: faults.dropConnections(drop) }];
  if (method === "GET" && path === "/connections") return [200, { connections: listener.connections().map((conn) => conn.info()), refusing: listener.refusing }];
  if (method === "GET" && path === "/faults") return [200, { faults: faults.faults(since), dropped: faults.dropped }];
  if (method === "POST" && path === "/objects") {
    const body = await readJson(req);
    const { apiVersion, kind } = (body ?? {}) as { apiVersion?: unknown; kind?: unknown };
    const def = findByKind(String(apiVersion), String(kind));
    if (!def) throw new ControlError(400, `apiVersion/kind ${String(apiVersion)}/${String(kind)} is not served by the testbed`);
    return [200, upsertObject(store, def, body)];
  }
  if (method === "DELETE" && path === "/objects") {
    const q = url.searchParams;
    const def = findByKind(q.get("apiVersion") ?? "", q.get("kind") ?? "");
    if (!def) throw new ControlError(400, `apiVersion/kind ${q.get("apiVersion")}/${q.get("kind")} is not served by the testbed`);
    const gone = store.remove(resourceKey(def), q.get("namespace") ?? "default", q.get("name") ?? "");
    if (!gone) throw new ControlError(404, `no ${def.kind} ${q.get("namespace") ?? "default"}/${q.get("name")}`);
    return [200, gone];
  }
  if (method === "GET" && path === "/stats") {
    return [200, { store: store.stats(), faultsDropped: faults.dropped, connectionsRejected: listener.rejected, connections: listener.connections().length }];
  }
  throw new ControlError(404, `no control endpoint ${method} ${path}`);
}

export function createControlServer(deps: ControlDeps): http.Server {
  return http.createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://control");
    const answer = (status: number, body: unknown): void => {
      if (url.pathname === "/faults.jsonl") {
        res.writeHead(status, { "content-type": "application/x-ndjson" });
        res.end(deps.faults.faults(Number(url.searchParams.get("since") ?? "0")).map((record) => JSON.stringify(record) + "\n").join(""));
        return;
      }
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (req.method === "GET" && url.pathname === "/faults.jsonl") {
      answer(200, null);
      return;
    }
    route(deps, req, url).then(([status, body]) => answer(status, body), (error: unknown) => {
      const status = error instanceof ControlError ? error.status : error instanceof ApiError ? error.code : 500;
      answer(status, { error: (error as Error).message });
    });
  });
}
