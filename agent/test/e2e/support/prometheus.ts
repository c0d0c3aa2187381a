// A real Prometheus (by default the current release `npm run tools` builds;
// any generation of support/tools.ts) for e2e tests: scrapes one
// target every second, evaluates dashboards/alerts.yaml every second, sends
// alerts to an Alertmanager, and answers PromQL over its HTTP API.
// Its own ports and storage, in a temp dir: a system Prometheus on :9090 is
// left alone.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";
import { stringify } from "yaml";
import { z } from "zod";
import { freeLoopbackPort, startReadyServer } from "./managedProcess.ts";
import { CURRENT_MONITORING, type LocatedTool } from "./tools.ts";
export const alertRulesPath = fileURLToPath(new URL("../../../../dashboards/alerts.yaml", import.meta.url));

export interface PrometheusOptions {
  /** host:port serving /metrics, on loopback. */
  target: string;
  metricsPath?: string;
  /** Labels added to the target, as a ServiceMonitor's relabelling would (e.g. { node: "n1" }). */
  targetLabels?: Record<string, string>;
  /** Rule files to load; dashboards/alerts.yaml by default. */
  ruleFiles?: string[];
  /** host:port of an Alertmanager to send alerts to. */
  alertmanager?: string;
  /** The binary; the current generation's by default. */
  tool?: LocatedTool;
}

const sample = z.object({ metric: z.record(z.string(), z.string()), value: z.tuple([z.number(), z.string()]) });
const queryAnswer = z.discriminatedUnion("status", [
  z.object({
    status: z.literal("success"),
    data: z.discriminatedUnion("resultType", [
      z.object({ resultType: z.literal("vector"), result: z.array(sample) }),
      z.object({ resultType: z.literal("scalar"), result: z.tuple([z.number(), z.string()]) }),
    ]),
    warnings: z.array(z.string()).optional(),
  }),
  z.object({ status: z.literal("error"), errorType: z.string(), error: z.string() }),
]);

export interface Sample {
  labels: Record<string, string>;
  value: number;
}

export interface RunningPrometheus {
  /** Base URL, e.g. http://127.0.0.1:41234 */
  readonly url: string;
  /** Instant query; throws with Prometheus's error text when the query fails. */
  query(expr: string): Promise<Sample[]>;
  /** Polls `query(expr)` until `accept` holds for its samples; throws after timeoutMs with the last answer. */
  waitFor(expr: string, accept: (samples: Sample[]) => boolean, timeoutMs?: number): Promise<Sample[]>;
  /** Prometheus's log so far (for assertion messages). */
  output(): string;
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

export async function startPrometheus(options: PrometheusOptions): Promise<RunningPrometheus> {
  const tool = options.tool ?? CURRENT_MONITORING.prometheus;
  const binary = tool.path ?? (() => { throw new Error(tool.reason); })();
  const dir = mkdtempSync(join(tmpdir(), "lostwrite-prometheus-"));
  const port = await freeLoopbackPort();
  const config = {
    global: { scrape_interval: "1s", scrape_timeout: "1s", evaluation_interval: "1s" },
    rule_files: options.ruleFiles ?? [alertRulesPath],
    ...(options.alertmanager
      ? { alerting: { alertmanagers: [{ static_configs: [{ targets: [options.alertmanager] }] }] } }
      : {}),
    scrape_configs: [
      {
        job_name: "lostwrite",
        // The agent's namespace/pod/container name the watched operator, not the agent (docs/metrics.md).
        honor_labels: true,
        metrics_path: options.metricsPath ?? "/metrics",
        static_configs: [{ targets: [options.target], labels: options.targetLabels ?? {} }],
      },
    ],
  };
  const configPath = join(dir, "prometheus.yml");
  writeFileSync(configPath, stringify(config));
  const { url, server, stop } = await startReadyServer("prometheus", binary, [
    `--config.file=${configPath}`,
    `--storage.tsdb.path=${join(dir, "data")}`,
    `--web.listen-address=127.0.0.1:${port}`,
    "--enable-feature=exemplar-storage",
    "--log.level=warn",
  ], { port, dir });

  const query = async (expr: string): Promise<Sample[]> => {
    const response = await fetch(`${url}/api/v1/query`, {
      method: "POST",
      body: new URLSearchParams({ query: expr }),
      signal: AbortSignal.timeout(10_000),
    });
    const answer = queryAnswer.parse(await response.json());
    if (answer.status === "error") throw new Error(`query failed (${answer.errorType}): ${answer.error}\n  ${expr}`);
    if (answer.data.resultType === "scalar") return [{ labels: {}, value: Number(answer.data.result[1]) }];
    return answer.data.result.map((s) => ({ labels: s.metric, value: Number(s.value[1]) }));
  };

  return {
    url,
    query,
    async waitFor(expr, accept, timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      let last: Sample[] = [];
      while (Date.now() < deadline) {
        last = await query(expr);
        if (accept(last)) return last;
        await sleep(250);
      }
      throw new Error(`timed out after ${timeoutMs} ms waiting on ${expr}; last answer ${JSON.stringify(last)}`);
    },
    output: () => server.output(),
    stop,
    [Symbol.asyncDispose]: stop,
  };
}
