// The agent's HTTP endpoint: /metrics for Prometheus, /healthz (the process
// answers: liveness, never tied to bpftrace, so a kernel problem does not
// make the kubelet restart-loop the agent), /readyz (the probe is attached).
// The WebSocket feed attaches to the same server for /events.
import http from "node:http";
import type { AgentMetrics } from "./metrics.ts";

export interface HttpServerOptions {
  host: string;
  port: number;
  metrics: AgentMetrics;
  ready: () => { ok: boolean; reason: string };
}

export async function startHttpServer(opts: HttpServerOptions): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD" }).end();
      return;
    }
    if (path === "/metrics") {
      opts.metrics
        .text()
        .then((text) => res.writeHead(200, { "content-type": opts.metrics.registry.contentType }).end(text))
        .catch((err: unknown) => res.writeHead(500).end(String(err)));
    } else if (path === "/healthz") {
      res.writeHead(200, { "content-type": "text/plain" }).end("ok\n");
    } else if (path === "/readyz") {
      const { ok, reason } = opts.ready();
      res.writeHead(ok ? 200 : 503, { "content-type": "text/plain" }).end(`${reason}\n`);
    } else if (path !== "/events") {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found: try /metrics, /healthz, /readyz, /events\n");
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  return server;
}
