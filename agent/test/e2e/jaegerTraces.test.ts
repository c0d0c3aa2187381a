// The trace a user opens from the dashboard, in a real trace backend: the
// agent exports its `status write lost` spans and forwards the operators'
// spans to Jaeger v2 (built by `npm run tools`), while the testbed apiserver
// resets a swallow-mode operator's status write. Jaeger's query API then has
// the loss inside the operator's own trace, under the operator's client span
// the loss event names, beside the reconcile span; and the dashboard's Jaeger
// trace link, filled from the exemplar a real Prometheus returns (with exemplar
// storage, scraping the agent's OpenMetrics exposition), opens that trace.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { z } from "zod";
import type { LossEvent } from "../../src/model.ts";
import { waitFor } from "./support/agentProcess.ts";
import { exemplarTraceLinkTemplates, fillLink, jaegerRequestOfExploreLink } from "./support/grafanaTraceLink.ts";
import { fetchJaegerTrace, JAEGER_TOOL, type JaegerSpan, type RunningJaeger } from "./support/jaeger.ts";
import { assertKernelRequirements, missingKernelRequirements } from "./support/kernelRequirements.ts";
import { startPrometheus, type ExemplarSeries, type RunningPrometheus } from "./support/prometheus.ts";
import { startTestbedStack, type OperatorProcess, type TestbedStack } from "./support/testbedStack.ts";
import { CURRENT_MONITORING } from "./support/tools.ts";

const prometheusTool = CURRENT_MONITORING.prometheus;

const targetsAnswer = z.object({
  status: z.literal("success"),
  data: z.object({
    activeTargets: z.array(z.object({ health: z.string(), lastError: z.string(), scrapePool: z.string() }).loose()),
  }),
});
const LOSS_SPAN = "status write lost";

/** The skip reason, or false under CI=true (then `before` fails on what is missing). */
function skipReason(): string | false {
  if (process.env.CI === "true") return false;
  const missing = [...missingKernelRequirements(), ...[prometheusTool, JAEGER_TOOL].filter((t) => t.path === null).map((t) => t.reason)];
  return missing.length > 0 ? missing.join("; ") : false;
}

describe("Jaeger: the loss span lands in the operator's trace, and the dashboard's link opens it", { skip: skipReason(), timeout: 120_000 }, () => {
  /** The stack's trace backend. */
  let jaeger: RunningJaeger;
  let stack: TestbedStack;
  let swallow: OperatorProcess;
  let prometheus: RunningPrometheus;
  const startedAt = Date.now() / 1000;

  before(async () => {
    assertKernelRequirements();
    for (const tool of [prometheusTool, JAEGER_TOOL]) if (tool.path === null) throw new Error(tool.reason);
    stack = await startTestbedStack({
      operators: [{ mode: "swallow", namespace: "swallow", workers: 1 }],
      correlationWindow: "2s",
    });
    [swallow] = stack.operators as [OperatorProcess];
    jaeger = stack.traces;
    prometheus = await startPrometheus({
      target: stack.agent.url.replace(/^http:\/\//, ""),
      targetLabels: { node: "e2e-node" },
      ruleFiles: [],
    });
  });

  after(async () => {
    if (process.env.LOSTWRITE_E2E_DEBUG && stack) {
      console.error({ events: stack.agent.events, agent: stack.agent.stderr, jaeger: jaeger?.output() });
    }
    await prometheus?.stop();
    await stack?.close();
  });

  let event: LossEvent | undefined;
  let trace: JaegerSpan[] = [];

  it("a reset status write of the swallow operator becomes a silent loss event with the operator's trace and span ids", async () => {
    await prometheus.waitFor('lostwrite_probe_up{node="e2e-node"}', (s) => s.length > 0, 15_000);
    // The operator opens its reconcile connection and settles it first (a status write that lands).
    stack.createWidget("swallow", "warm");
    await waitFor("the operator to have written swallow/warm", () =>
      swallow.log.some((line) => line.includes('"msg":"status written"') && line.includes('"name":"warm"')), 15_000);
    stack.apiserver.control.addRule({ id: "jaeger-reset", method: "PATCH", path: "*/namespaces/swallow/widgets/traced/status", action: "reset" });
    stack.createWidget("swallow", "traced");
    await waitFor("the connection_reset loss of swallow/traced", () => {
      event = stack.agent.events.find((e) => e.reconcile?.name === "traced" && e.cause === "connection_reset");
      return event !== undefined;
    }, 15_000);
    const context = JSON.stringify(event);
    assert.equal(event!.correlation, "span", context);
    assert.equal(event!.noticed, "no", context);
    assert.match(event!.trace_id ?? "", /^[0-9a-f]{32}$/, context);
    assert.match(event!.span_id ?? "", /^[0-9a-f]{16}$/, context);
  });

  it("Jaeger has the loss span in the operator's trace, a child of the client span the event names, beside the reconcile span", async () => {
    assert.ok(event?.trace_id, "the previous test produced the loss event");
    const { trace_id: traceId, span_id: spanId } = event;
    // Both exporters batch (100 ms) and Jaeger's pipeline batches too: wait for the three spans.
    await waitFor("the loss, client and reconcile spans in Jaeger", async () => {
      trace = (await jaeger.trace(traceId)) ?? [];
      const client = trace.find((s) => s.spanId === spanId);
      return trace.some((s) => s.name === LOSS_SPAN) && client !== undefined && trace.some((s) => s.spanId === client.parentSpanId);
    }, 20_000).catch((error: unknown) => {
      throw new Error(`${(error as Error).message}; trace ${traceId} now: ${JSON.stringify(trace)}; Jaeger: ${jaeger.output()}`);
    });
    const context = JSON.stringify(trace);
    assert.ok(trace.every((s) => s.traceId === traceId), context);

    const losses = trace.filter((s) => s.name === LOSS_SPAN);
    assert.equal(losses.length, 1, context);
    const [loss] = losses as [JaegerSpan];
    assert.equal(loss.parentSpanId, spanId, "the loss span's parent is the operator's span the event names");
    assert.equal(loss.service, "lostwrite");
    assert.equal(loss.tags["lostwrite.cause"], "connection_reset");
    assert.equal(loss.tags["lostwrite.noticed"], "no");
    assert.equal(loss.tags["otel.status_code"], "ERROR");

    // The operator's own spans, forwarded by the agent: its client span for the
    // lost PATCH, under its reconcile span for the Widget.
    const client = trace.find((s) => s.spanId === spanId)!;
    assert.equal(client.service, swallow.serviceName);
    assert.equal(client.name, "PATCH");
    const reconcile = trace.find((s) => s.spanId === client.parentSpanId)!;
    assert.equal(reconcile.service, swallow.serviceName);
    assert.equal(reconcile.name, "reconcile Widget");
    assert.equal(reconcile.tags.name, "traced");
    // The swallow operator's verdict: not an error.
    assert.notEqual(reconcile.tags["otel.status_code"], "ERROR", context);
  });

  it("the dashboard's Jaeger trace link, filled from Prometheus's exemplar, resolves to that trace", async () => {
    assert.ok(event?.trace_id && trace.length > 0, "the previous tests found the trace");
    let series: ExemplarSeries = [];
    let exemplarTraceId: string | undefined;
    await waitFor("the loss's exemplar in Prometheus", async () => {
      series = await prometheus.queryExemplars("lostwrite_status_write_lost_total", startedAt - 60, Date.now() / 1000 + 60);
      exemplarTraceId = series.flatMap((s) => s.exemplars).find((e) => e.labels.trace_id === event!.trace_id)?.labels.trace_id;
      return exemplarTraceId !== undefined;
    }, 20_000).catch((error: unknown) => {
      throw new Error(`${(error as Error).message}; last answer ${JSON.stringify(series)}; Prometheus: ${prometheus.output()}`);
    });
    // The exemplar as the agent set it, on the series the dashboard's silent-loss panels select.
    const found = series.find((s) => s.exemplars.some((e) => e.labels.trace_id === exemplarTraceId))!;
    const exemplar = found.exemplars.find((e) => e.labels.trace_id === exemplarTraceId)!;
    assert.deepEqual(exemplar.labels, { trace_id: event.trace_id, span_id: event.span_id });
    assert.equal(Number(exemplar.value), 1);
    assert.ok(exemplar.timestamp >= startedAt && exemplar.timestamp <= Date.now() / 1000 + 1, `exemplar time ${exemplar.timestamp}`);
    assert.deepEqual(
      [found.seriesLabels.__name__, found.seriesLabels.node, found.seriesLabels.controller, found.seriesLabels.request, found.seriesLabels.cause, found.seriesLabels.noticed],
      ["lostwrite_status_write_lost_total", "e2e-node", "widget", "status", "connection_reset", "no"],
    );

    const templates = exemplarTraceLinkTemplates("jaeger");
    assert.ok(templates.length > 0, "the dashboard has Jaeger trace links on exemplars");
    assert.equal(new Set(templates.map((t) => t.url)).size, 1, `one link for every loss panel: ${JSON.stringify(templates)}`);
    const now = Date.now();
    const link = fillLink(templates[0]!.url, {
      // A Grafana with a Jaeger data source (uid e2e-jaeger) whose URL is the test's Jaeger.
      jaeger: "e2e-jaeger",
      "__data.fields.trace_id": exemplarTraceId!,
      __from: String(Math.floor(startedAt * 1000)),
      __to: String(now),
    });
    const request = jaegerRequestOfExploreLink(link, { "e2e-jaeger": jaeger.url });
    const opened = await fetchJaegerTrace(request);
    assert.ok(opened, `${link} → ${request}: no trace`);
    const openedIds = new Set(opened.map((s) => s.spanId));
    assert.ok(trace.every((s) => openedIds.has(s.spanId)), `the link opens the trace holding the loss: ${JSON.stringify(opened)}`);
    assert.ok(opened.some((s) => s.name === LOSS_SPAN && s.parentSpanId === event!.span_id));
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
