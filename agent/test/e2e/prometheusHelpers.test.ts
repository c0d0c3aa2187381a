// Proves the Prometheus/Alertmanager helpers and both dashboards against each
// generation users run (the current releases, built by `npm run tools`, and
// Debian 12's 2.x packages): Prometheus scrapes a small prom-client server that serves an
// AgentMetrics registry, every dashboard query runs through its HTTP API
// without error and returns data, and a silent loss set through AgentMetrics
// fires LostwriteSilentStatusWriteLoss, which reaches a real Alertmanager and
// its webhook with the labels on-call needs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { AgentMetrics } from "../../src/telemetry/metrics.ts";
import { startAlertmanager, startWebhookReceiver } from "./support/alertmanager.ts";
import { dashboardQueries, loadDashboard } from "./support/dashboardQueries.ts";
import { startPrometheus } from "./support/prometheus.ts";
import { MONITORING_GENERATIONS, skipUnlessCI } from "./support/tools.ts";
import { repoPath } from "../repoPath.ts";

const operatorDashboardPath = repoPath("dashboards/lostwrite-operator.json");

const workload = { namespace: "ops", pod: "widget-operator-1", container: "manager", process: "manager" };

/** Gives every metric a series, as a busy agent would. */
function feed(metrics: AgentMetrics): void {
  metrics.probeUp.set(1);
  metrics.probeInfo.set({ variant: "socket", bpftrace_version: "0.17.0" }, 1);
  metrics.targets.set({ source: "comm" }, 2);
  metrics.writes.inc(workload, 50);
  metrics.writeBytes.inc(workload, 50 * 1834);
  metrics.statusWriteLost.inc({ ...workload, controller: "widget", request: "status", cause: "connection_reset", errno: "", noticed: "yes" });
  metrics.syscallErrors.inc({ ...workload, syscall: "connect", errno: "ECONNREFUSED" });
  metrics.statusWriteLost.inc({ ...workload, controller: "", request: "unknown", cause: "connect_failed", errno: "ECONNREFUSED", noticed: "unknown" });
  metrics.connectionLosses.inc({ ...workload, reason: "reset" });
  metrics.retransmits.inc(workload, 3);
  metrics.statusWriteRetries.inc({ namespace: workload.namespace, pod: workload.pod, code: "429" });
  metrics.probeRestarts.inc({ reason: "exited" }, 0);
  metrics.probeEventsLost.inc(0);
  metrics.probeParseErrors.inc(0);
  metrics.spansReceived.inc(20);
  metrics.spansRejected.inc({ reason: "malformed" }, 0);
  metrics.spanIndexSize.set(120);
  metrics.spanIndexEvictions.inc({ reason: "age" }, 5);
  metrics.eventsDropped.inc({ stage: "feed", reason: "slow_client" }, 0);
  metrics.queueLength.set({ queue: "probeToCorrelate" }, 3);
  metrics.feedClients.set(1);
  metrics.detectionLatency.observe(0.02);
  metrics.detectionLatency.observe(0.3);
}

for (const generation of MONITORING_GENERATIONS) void test(
  `Prometheus scrapes AgentMetrics, every dashboard query answers, and a silent loss reaches Alertmanager (${generation.name})`,
  { skip: skipUnlessCI(generation.prometheus, generation.alertmanager), timeout: 90_000 },
  async (t) => {
    const metrics = new AgentMetrics();
    feed(metrics);
    const ticker = setInterval(() => feed(metrics), 250);
    t.after(() => clearInterval(ticker));

    const exporter = createServer((request, response) => {
      if (request.url !== "/metrics") {
        response.writeHead(404).end();
        return;
      }
      metrics.text().then(
        (text) => response.writeHead(200, { "content-type": metrics.registry.contentType }).end(text),
        (error: unknown) => response.writeHead(500).end(String(error)),
      );
    });
    await new Promise<void>((resolve) => exporter.listen(0, "127.0.0.1", resolve));
    t.after(() => new Promise<void>((resolve) => exporter.close(() => resolve())));
    const address = exporter.address();
    assert.ok(address !== null && typeof address === "object");

    const webhook = await startWebhookReceiver();
    t.after(() => webhook.close());
    const alertmanager = await startAlertmanager({ webhookUrl: webhook.url, tool: generation.alertmanager });
    t.after(() => alertmanager.stop());
    const prometheus = await startPrometheus({
      target: `127.0.0.1:${address.port}`,
      targetLabels: { node: "e2e-node" },
      alertmanager: alertmanager.address,
      tool: generation.prometheus,
    });
    t.after(() => prometheus.stop());

    // Enough scrapes for rate() over the dashboard's rate interval.
    await prometheus.waitFor('count_over_time(lostwrite_probe_up{node="e2e-node"}[1m])', (s) => (s[0]?.value ?? 0) >= 6);

    // Both dashboards: the on-call one and one operator's drill-down.
    const empty: string[] = [];
    for (const dashboard of [loadDashboard(), loadDashboard(operatorDashboardPath)]) {
      for (const { panel, expr } of dashboardQueries({ rateInterval: "5s", range: "1m" }, dashboard)) {
        const samples = await prometheus.query(expr); // throws on a query error, naming the expression
        if (samples.length === 0) empty.push(panel);
      }
    }
    assert.deepEqual(empty, [], "dashboard panels whose query returned no data");

    // A silent loss: the operator's span said OK. The series is new, so only
    // the alert's new-series branch can see it.
    metrics.statusWriteLost.inc({ ...workload, controller: "widget", request: "status", cause: "connection_closed_unanswered", errno: "", noticed: "no" });
    const alert = await webhook.waitFor(
      (a) => a.status === "firing" && a.labels.alertname === "LostwriteSilentStatusWriteLoss",
    );
    assert.deepEqual(alert.labels, {
      alertname: "LostwriteSilentStatusWriteLoss",
      severity: "critical",
      node: "e2e-node",
      namespace: "ops",
      pod: "widget-operator-1",
      controller: "widget",
      request: "status",
      cause: "connection_closed_unanswered",
    });
    assert.match(alert.annotations.runbook_url ?? "", /^https?:\/\/\S+#lostwritesilentstatuswriteloss$/);
    assert.match(alert.annotations.description ?? "", /pod ops\/widget-operator-1 on node\s+"e2e-node"/);
    assert.deepEqual(webhook.rejected, []);
  },
);
