// A real Alertmanager (by default the current release `npm run tools` builds;
// any generation of support/tools.ts) for e2e
// tests, routing every alert to one webhook after 1 s, and a webhook receiver
// that collects what Alertmanager delivers. Clustering is off and storage is in
// a temp dir, so a system Alertmanager is left alone.
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { stringify } from "yaml";
import { z } from "zod";
import { freeLoopbackPort, startReadyServer } from "./managedProcess.ts";
import { CURRENT_MONITORING, type LocatedTool } from "./tools.ts";

export interface RunningAlertmanager {
  /** Base URL, e.g. http://127.0.0.1:41235 */
  readonly url: string;
  /** host:port, as Prometheus's alerting config wants it. */
  readonly address: string;
  output(): string;
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** `tool`: the binary, the current generation's by default. */
export async function startAlertmanager(options: { webhookUrl: string; tool?: LocatedTool }): Promise<RunningAlertmanager> {
  const tool = options.tool ?? CURRENT_MONITORING.alertmanager;
  const binary = tool.path ?? (() => { throw new Error(tool.reason); })();
  const dir = mkdtempSync(join(tmpdir(), "lostwrite-alertmanager-"));
  const port = await freeLoopbackPort();
  const config = {
    route: {
      receiver: "test",
      group_by: ["alertname"],
      group_wait: "1s",
      group_interval: "1s",
      repeat_interval: "1h",
    },
    receivers: [{ name: "test", webhook_configs: [{ url: options.webhookUrl, send_resolved: true }] }],
  };
  const configPath = join(dir, "alertmanager.yml");
  writeFileSync(configPath, stringify(config));
  const { url, server, stop } = await startReadyServer("alertmanager", binary, [
    `--config.file=${configPath}`,
    `--storage.path=${join(dir, "data")}`,
    `--web.listen-address=127.0.0.1:${port}`,
    // Empty: no gossip cluster (it would listen on 0.0.0.0:9094).
    "--cluster.listen-address=",
    "--log.level=warn",
  ], { port, dir });
  return { url, address: `127.0.0.1:${port}`, output: () => server.output(), stop, [Symbol.asyncDispose]: stop };
}

// Alertmanager's webhook payload (version 4), the parts tests look at.
const webhookAlert = z.object({
  status: z.enum(["firing", "resolved"]),
  labels: z.record(z.string(), z.string()),
  annotations: z.record(z.string(), z.string()),
  startsAt: z.string(),
});
const webhookPayload = z.object({
  version: z.literal("4"),
  status: z.enum(["firing", "resolved"]),
  receiver: z.string(),
  alerts: z.array(webhookAlert),
});
export type WebhookAlert = z.infer<typeof webhookAlert>;

export interface WebhookReceiver {
  /** URL to give Alertmanager. */
  readonly url: string;
  /** Every alert delivered so far, in arrival order. */
  readonly alerts: WebhookAlert[];
  /** Bodies that were not a valid webhook payload (a test should expect none). */
  readonly rejected: string[];
  /** Resolves with the first delivered alert `match` accepts; throws after timeoutMs. */
  waitFor(match: (alert: WebhookAlert) => boolean, timeoutMs?: number): Promise<WebhookAlert>;
  close(): Promise<void>;
}

const bodyLimit = 1024 * 1024;

/** An HTTP server on 127.0.0.1 that records Alertmanager webhook deliveries. */
export async function startWebhookReceiver(): Promise<WebhookReceiver> {
  const alerts: WebhookAlert[] = [];
  const rejected: string[] = [];
  const server = createServer((request, response) => {
    let body = "";
    request.setEncoding("utf8");
    request.on("data", (chunk: string) => {
      if (body.length < bodyLimit) body += chunk;
    });
    request.on("end", () => {
      let payload: unknown = null;
      try {
        payload = JSON.parse(body);
      } catch {
        // recorded as rejected below
      }
      const parsed = webhookPayload.safeParse(payload);
      if (parsed.success) alerts.push(...parsed.data.alerts);
      else rejected.push(body);
      response.writeHead(parsed.success ? 200 : 400).end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no TCP address for the webhook receiver");
  return {
    url: `http://127.0.0.1:${address.port}/alerts`,
    alerts,
    rejected,
    async waitFor(match, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const found = alerts.find(match);
        if (found) return found;
        await sleep(100);
      }
      throw new Error(`no matching alert delivered within ${timeoutMs} ms; got ${JSON.stringify(alerts)}`);
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
