// Trace links end to end: a real Prometheus with exemplar storage scrapes
// the real agent (asking for OpenMetrics, as it always does) while the
// testbed apiserver resets a swallow-mode operator's status write; the loss,
// joined with the operator's span, reaches Prometheus as an exemplar of
// lostwrite_status_write_lost_total, and /api/v1/query_exemplars answers with
// the operator's trace and span ids: what the dashboard's trace links open.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { z } from "zod";
import type { LossEvent } from "../../src/model.ts";
import { waitFor } from "./support/agentProcess.ts";
import { assertKernelRequirements, missingKernelRequirements } from "./support/kernelRequirements.ts";
import { startPrometheus, type RunningPrometheus } from "./support/prometheus.ts";
import { startTestbedStack, type OperatorProcess, type TestbedStack } from "./support/testbedStack.ts";
import { CURRENT_MONITORING } from "./support/tools.ts";

/** The current Prometheus: what a user clicking a trace link runs. */
const prometheusTool = CURRENT_MONITORING.prometheus;

/** The skip reason, or false under CI=true (then `before` fails on what is missing). */
function skipReason(): string | false {
  if (process.env.CI === "true") return false;
  const missing = [...missingKernelRequirements(), ...(prometheusTool.path === null ? [prometheusTool.reason] : [])];
  return missing.length > 0 ? missing.join("; ") : false;
}

const exemplarAnswer = z.discriminatedUnion("status", [
  z.object({
    status: z.literal("success"),
    data: z.array(
      z.object({
        seriesLabels: z.record(z.string(), z.string()),
        exemplars: z.array(z.object({ labels: z.record(z.string(), z.string()), value: z.string(), timestamp: z.number() })),
      }),
    ),
  }),
  z.object({ status: z.literal("error"), errorType: z.string(), error: z.string() }),
]);
type ExemplarSeries = Extract<z.infer<typeof exemplarAnswer>, { status: "success" }>["data"];

const targetsAnswer = z.object({
  status: z.literal("success"),
  data: z.object({
    activeTargets: z.array(z.object({ health: z.string(), lastError: z.string(), scrapePool: z.string() }).loose()),
  }),
});

describe("exemplars: a loss's trace id reaches Prometheus's exemplar storage", { skip: skipReason(), timeout: 90_000 }, () => {
  let stack: TestbedStack;
  let swallow: OperatorProcess;
  let prometheus: RunningPrometheus;
  const startedAt = Date.now() / 1000;

  before(async () => {
    assertKernelRequirements();
    if (prometheusTool.path === null) throw new Error(prometheusTool.reason);
    stack = await startTestbedStack({
      operators: [{ mode: "swallow", namespace: "swallow", workers: 1 }],
      correlationWindow: "2s",
    });
    [swallow] = stack.operators as [OperatorProcess];
    // startPrometheus runs with --enable-feature=exemplar-storage.
    prometheus = await startPrometheus({
      target: stack.agent.url.replace(/^http:\/\//, ""),
      targetLabels: { node: "e2e-node" },
      ruleFiles: [],
    });
  });

  after(async () => {
    if (process.env.LOSTWRITE_E2E_DEBUG && stack) {
      console.error({ events: stack.agent.events, agent: stack.agent.stderr, prometheus: prometheus?.output() });
    }
    await prometheus?.stop();
    await stack?.close();
  });

  async function queryExemplars(expr: string): Promise<ExemplarSeries> {
    const response = await fetch(`${prometheus.url}/api/v1/query_exemplars`, {
      method: "POST",
      body: new URLSearchParams({ query: expr, start: String(startedAt - 60), end: String(Date.now() / 1000 + 60) }),
      signal: AbortSignal.timeout(10_000),
    });
    const answer = exemplarAnswer.parse(await response.json());
    if (answer.status === "error") throw new Error(`query_exemplars failed (${answer.errorType}): ${answer.error}`);
    return answer.data;
  }

  let event: LossEvent | undefined;

  it("a reset status write, joined with the operator's span, becomes a loss event with a trace id", async () => {
    await prometheus.waitFor('lostwrite_probe_up{node="e2e-node"}', (s) => s.length > 0, 15_000);
    // The operator opens its reconcile connection and settles it first (a status write that lands).
    stack.createWidget("swallow", "warm");
    await waitFor("the operator to have written swallow/warm", () =>
      swallow.log.some((line) => line.includes('"msg":"status written"') && line.includes('"name":"warm"')), 15_000);
    stack.apiserver.control.addRule({ id: "traced-reset", method: "PATCH", path: "*/namespaces/swallow/widgets/traced/status", action: "reset" });
    stack.createWidget("swallow", "traced");
    await waitFor("the connection_reset loss of swallow/traced", () => {
      event = stack.agent.events.find((e) => e.reconcile?.name === "traced" && e.cause === "connection_reset");
      return event !== undefined;
    }, 15_000);
    const context = JSON.stringify(event);
    assert.equal(event!.correlation, "span", context);
    assert.match(event!.trace_id ?? "", /^[0-9a-f]{32}$/, context);
    assert.match(event!.span_id ?? "", /^[0-9a-f]{16}$/, context);
    // The ids are the operator's own: its client span for this write, as it exported it.
    await waitFor("the operator's client span in the trace backend", async () =>
      ((await stack.traces.trace(event!.trace_id!)) ?? []).some((s) => s.spanId === event!.span_id), 10_000);
  });

  it("query_exemplars on lostwrite_status_write_lost_total finds the loss's trace and span ids", async () => {
    assert.ok(event, "the previous test produced the loss event");
    let series: ExemplarSeries = [];
    let found: ExemplarSeries[number] | undefined;
    await waitFor("the loss's exemplar in Prometheus", async () => {
      series = await queryExemplars("lostwrite_status_write_lost_total");
      found = series.find((s) => s.exemplars.some((e) => e.labels.trace_id === event!.trace_id));
      return found !== undefined;
    }, 20_000).catch((error: unknown) => {
      throw new Error(`${(error as Error).message}; last answer ${JSON.stringify(series)}; Prometheus: ${prometheus.output()}`);
    });
    const exemplar = found!.exemplars.find((e) => e.labels.trace_id === event!.trace_id)!;
    assert.deepEqual(exemplar.labels, { trace_id: event.trace_id, span_id: event.span_id });
    assert.equal(Number(exemplar.value), 1);
    assert.ok(exemplar.timestamp >= startedAt && exemplar.timestamp <= Date.now() / 1000 + 1, `exemplar time ${exemplar.timestamp}`);
    // On the series the dashboard's silent-loss panels select.
    assert.equal(found!.seriesLabels.__name__, "lostwrite_status_write_lost_total");
    assert.equal(found!.seriesLabels.node, "e2e-node");
    assert.equal(found!.seriesLabels.controller, "widget");
    assert.equal(found!.seriesLabels.request, "status");
    assert.equal(found!.seriesLabels.cause, "connection_reset");
    assert.equal(found!.seriesLabels.noticed, "no");
  });

  // Exemplars come only in the OpenMetrics exposition, so after the test above
  // this says Prometheus's (strict) OpenMetrics parser took all of it.
  it("Prometheus parsed the whole OpenMetrics exposition: the target is up with no scrape error", async () => {
    const response = await fetch(`${prometheus.url}/api/v1/targets?state=active`, { signal: AbortSignal.timeout(10_000) });
    const { data } = targetsAnswer.parse(await response.json());
    const target = data.activeTargets.find((t) => t.scrapePool === "lostwrite");
    assert.ok(target, JSON.stringify(data));
    assert.equal(target.lastError, "");
    assert.equal(target.health, "up");
    const [samples] = await prometheus.query('scrape_samples_scraped{job="lostwrite"}');
    assert.ok((samples?.value ?? 0) > 20, `samples scraped: ${JSON.stringify(samples)}`);
    // Every family, not only the loss counter: the histogram came through OpenMetrics too.
    const buckets = await prometheus.query('lostwrite_detection_latency_seconds_bucket{le="+Inf"}');
    assert.equal(buckets.length, 1);
  });
});
