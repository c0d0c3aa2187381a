// The agent's HTTP endpoint: /metrics for Prometheus, /healthz (the process
// answers: liveness, never tied to bpftrace, so a kernel problem does not
// make the kubelet restart-loop the agent), /readyz (the probe is attached).
// The WebSocket feed attaches to the same server for /events.
// /metrics answers in the format the scraper asks for: OpenMetrics (with the
// loss counters' trace exemplars) when its Accept header prefers
// `application/openmetrics-text`, as Prometheus's does; the classic text
// format otherwise.
import type { Server } from "node:http";
import http from "../nodeHttp.ts";
import { Registry } from "prom-client";
import type { AgentMetrics } from "../telemetry/metrics.ts";

type MetricsFormat = "openmetrics" | "text";

/**
 * The exposition format for an Accept header: the most preferred (highest q,
 * then first listed) media range we serve. OpenMetrics only at version 1.0.0
 * or unversioned; anything else, or nothing, gets the classic text format.
 */
export function negotiateMetricsFormat(accept: string | undefined): MetricsFormat {
  if (!accept) return "text";
  const ranges = accept
    .split(",")
    .map((range, index) => {
      const [type = "", ...parameters] = range.split(";").map((part) => part.trim());
      const params = new Map(
        parameters.map((parameter) => {
          const eq = parameter.indexOf("=");
          return eq < 0
            ? [parameter.toLowerCase(), ""]
            : [parameter.slice(0, eq).trim().toLowerCase(), parameter.slice(eq + 1).trim().replace(/^"(.*)"$/, "$1")];
        }),
      );
      const q = params.has("q") ? Number(params.get("q")) : 1;
      return { type: type.toLowerCase(), version: params.get("version"), q: Number.isFinite(q) ? q : 0, index };
    })
    .filter((range) => range.q > 0)
    .sort((a, b) => b.q - a.q || a.index - b.index);
  for (const range of ranges) {
    if (range.type === "application/openmetrics-text" && (range.version === undefined || range.version === "1.0.0")) return "openmetrics";
    if (range.type === "text/plain" || range.type === "text/*" || range.type === "*/*") return "text";
  }
  return "text";
}

interface HttpServerOptions {
  host: string;
  port: number;
  metrics: AgentMetrics;
  ready: () => { ok: boolean; reason: string };
  /** What /runbooks answers (sinks/runbooksPage.ts). */
  runbooks?: { status: number; html: string };
}

export async function startHttpServer(opts: HttpServerOptions): Promise<Server> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD" }).end();
      return;
    }
    if (path === "/metrics") {
      const openMetrics = negotiateMetricsFormat(req.headers.accept) === "openmetrics";
      const contentType = openMetrics ? Registry.OPENMETRICS_CONTENT_TYPE : opts.metrics.registry.contentType;
      (openMetrics ? opts.metrics.openMetrics() : opts.metrics.text())
        .then((text) => res.writeHead(200, { "content-type": contentType, vary: "Accept" }).end(text))
        .catch((err: unknown) => res.writeHead(500).end(String(err)));
    } else if (path === "/healthz") {
      res.writeHead(200, { "content-type": "text/plain" }).end("ok\n");
    } else if (path === "/readyz") {
      const { ok, reason } = opts.ready();
      res.writeHead(ok ? 200 : 503, { "content-type": "text/plain" }).end(`${reason}\n`);
    } else if (path === "/runbooks" && opts.runbooks !== undefined) {
      res.writeHead(opts.runbooks.status, { "content-type": "text/html; charset=utf-8" }).end(opts.runbooks.html);
    } else if (path !== "/events") {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found: try /metrics, /healthz, /readyz, /events, /runbooks\n");
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  return server;
}
