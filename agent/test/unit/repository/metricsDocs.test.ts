// docs/metrics.md is the reference users read; this test keeps it honest.
// It fails when the agent exports a metric or a label the page does not list,
// when the page lists a metric the agent does not export, and when a closed
// label set (metrics.ts, agent/src/vocabulary/) and the page's value table disagree.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { execa } from "execa";
import { z } from "zod";
import { AgentMetrics, PROBE_RESTART_REASONS, SOCKET_PROBE_RESTART_REASONS, UPROBE_RELOAD_REASONS, SPAN_REJECT_REASONS, GO_COVERAGES, TARGET_SOURCES, KUBERNETES_WATCHED, KUBERNETES_WATCH_ERRORS } from "../../../src/telemetry/metrics.ts";
import { DROP_REASONS, DROP_STAGES } from "../../../src/vocabulary/drops.ts";
import { CONNECTION_LOSS_REASONS, LOSS_CAUSES, NOTICED, REQUESTS, VERDICTS } from "../../../src/vocabulary/causes.ts";
import { SYSCALL_LABELS } from "../../../src/vocabulary/syscalls.ts";
import { ANSWER_RULES } from "../../../src/vocabulary/answerRules.ts";
import { MONITORING_GENERATIONS, skipUnlessCI } from "../../e2e/support/tools.ts";
import { repoPath } from "../../repoPath.ts";

const doc = readFileSync(repoPath("docs/metrics.md"), "utf8");
const [metricsPart = "", valuesPart = ""] = doc.split(/^## Label values$/m);

/** Cells of every markdown table row whose first cell is a `lostwrite_…` metric name. */
function metricRows(markdown: string): string[][] {
  return markdown
    .split("\n")
    .filter((line) => line.startsWith("| `lostwrite_"))
    .map((line) => line.slice(1, -1).split("|").map((cell) => cell.trim()));
}

/** "`a`, `b`" → ["a", "b"]; an empty cell → []. */
function codeList(cell: string): string[] {
  return [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1] ?? "");
}

interface DocumentedMetric {
  type: string;
  labels: string[];
}

const documented = new Map<string, DocumentedMetric>();
for (const [name = "", type = "", labels = ""] of metricRows(metricsPart)) {
  const metric = codeList(name)[0] ?? "";
  assert.ok(!documented.has(metric), `docs/metrics.md lists ${metric} twice`);
  documented.set(metric, { type, labels: codeList(labels) });
}

const labelNamesShape = z.object({ labelNames: z.array(z.string()).readonly() });

async function exported(): Promise<Map<string, DocumentedMetric>> {
  const metrics = new AgentMetrics();
  const result = new Map<string, DocumentedMetric>();
  for (const metric of await metrics.registry.getMetricsAsJSON()) {
    // prom-client keeps the declared label names on the metric object but does
    // not type them; read them through a schema rather than a cast.
    const { labelNames } = labelNamesShape.parse(metrics.registry.getSingleMetric(metric.name));
    result.set(metric.name, { type: String(metric.type), labels: [...labelNames] });
  }
  return result;
}

void test("docs/metrics.md lists every exported metric with its type and exact labels", async () => {
  const actual = await exported();
  assert.ok(actual.size > 0);
  for (const [name, { type, labels }] of actual) {
    const entry = documented.get(name);
    assert.ok(entry, `${name} is exported by AgentMetrics but missing from docs/metrics.md`);
    assert.equal(entry.type, type, `${name}: docs/metrics.md says type ${entry.type}, the code says ${type}`);
    assert.deepEqual(
      [...entry.labels].sort(),
      [...labels].sort(),
      `${name}: labels in docs/metrics.md differ from the code`,
    );
  }
});

void test("docs/metrics.md lists no metric the agent does not export", async () => {
  const actual = await exported();
  for (const name of documented.keys()) {
    assert.ok(actual.has(name), `docs/metrics.md lists ${name}, which AgentMetrics does not export`);
  }
});

// Which exported closed set belongs to which (metric, label): the page must show each one.
const closedSets: { metric: string; label: string; values: readonly string[] }[] = [
  { metric: "lostwrite_status_write_lost_total", label: "cause", values: LOSS_CAUSES },
  { metric: "lostwrite_status_write_lost_total", label: "noticed", values: NOTICED },
  { metric: "lostwrite_status_write_lost_total", label: "request", values: REQUESTS },
  { metric: "lostwrite_status_write_lost_total", label: "verdict", values: VERDICTS },
  { metric: "lostwrite_apiserver_syscall_errors_total", label: "syscall", values: SYSCALL_LABELS },
  { metric: "lostwrite_apiserver_connection_losses_total", label: "reason", values: CONNECTION_LOSS_REASONS },
  { metric: "lostwrite_probe_restarts_total", label: "reason", values: SOCKET_PROBE_RESTART_REASONS },
  { metric: "lostwrite_go_probe_restarts_total", label: "reason", values: PROBE_RESTART_REASONS },
  { metric: "lostwrite_tls_probe_restarts_total", label: "reason", values: PROBE_RESTART_REASONS },
  { metric: "lostwrite_uprobe_program_reloads_total", label: "reason", values: UPROBE_RELOAD_REASONS },
  { metric: "lostwrite_go_targets", label: "coverage", values: GO_COVERAGES },
  { metric: "lostwrite_spans_rejected_total", label: "reason", values: SPAN_REJECT_REASONS },
  { metric: "lostwrite_events_dropped_total", label: "reason", values: DROP_REASONS },
  { metric: "lostwrite_events_dropped_total", label: "stage", values: DROP_STAGES },
  { metric: "lostwrite_targets", label: "source", values: TARGET_SOURCES },
  { metric: "lostwrite_kubernetes_watch_errors_total", label: "resource", values: KUBERNETES_WATCHED },
  { metric: "lostwrite_kubernetes_watch_errors_total", label: "reason", values: KUBERNETES_WATCH_ERRORS },
  { metric: "lostwrite_probe_info", label: "answer_rule", values: Object.values(ANSWER_RULES) },
];

const valueRows = metricRows(valuesPart).map(([metric = "", label = "", values = "", initialised = ""]) => ({
  metric: codeList(metric)[0] ?? "",
  label: codeList(label)[0] ?? "",
  values: codeList(values),
  initialised: initialised === "yes",
}));

void test("the label value table matches the closed sets in metrics.ts", () => {
  for (const set of closedSets) {
    const row = valueRows.find((r) => r.metric === set.metric && r.label === set.label);
    assert.ok(row, `docs/metrics.md has no value row for ${set.metric} ${set.label}`);
    assert.deepEqual(row.values, [...set.values], `${set.metric} ${set.label}: values differ from metrics.ts`);
  }
  for (const row of valueRows) {
    assert.ok(
      closedSets.some((s) => s.metric === row.metric && s.label === row.label),
      `docs/metrics.md lists values for ${row.metric} ${row.label}, which has no closed set in metrics.ts`,
    );
    assert.ok(documented.get(row.metric)?.labels.includes(row.label), `${row.metric} has no label ${row.label}`);
  }
});

void test("sets the page calls initialised exist as 0 series from start-up, and only those", async () => {
  const json = await new AgentMetrics().registry.getMetricsAsJSON();
  for (const row of valueRows) {
    const series = json.find((m) => m.name === row.metric)?.values ?? [];
    const present = row.values.filter((v) => series.some((s) => s.labels[row.label] === v && s.value === 0));
    if (row.initialised) {
      assert.deepEqual(present, row.values, `${row.metric} ${row.label} is documented as initialised`);
    } else {
      assert.deepEqual(present, [], `${row.metric} ${row.label} is initialised; docs/metrics.md says no`);
    }
  }
});

// Each Prometheus generation users run lints the exposition its own way.
for (const { name, promtool } of MONITORING_GENERATIONS) void test(`promtool check metrics is clean on the agent's exposition (${name})`, { skip: skipUnlessCI(promtool) }, async () => {
  const metrics = new AgentMetrics();
  // One series of every labelled metric, so the lint sees every label name.
  const workload = { namespace: "ops", pod: "widget-operator-1", container: "manager", process: "manager" };
  metrics.statusWriteLost.inc({ ...workload, controller: "widget", request: "status", cause: "write_failed", errno: "EPIPE", noticed: "no" });
  metrics.syscallErrors.inc({ ...workload, syscall: "write", errno: "EPIPE" });
  metrics.writes.inc(workload);
  metrics.writeBytes.inc(workload, 1834);
  metrics.connectionLosses.inc({ ...workload, reason: "reset" });
  metrics.retransmits.inc(workload);
  metrics.probeInfo.set({ variant: "socket", bpftrace_version: "0.17.0" }, 1);
  metrics.spanIndexEvictions.inc({ reason: "age" });
  metrics.eventsDropped.inc({ stage: "correlate", reason: "queue_full" });
  metrics.queueLength.set({ queue: "probeToCorrelate" }, 0);
  metrics.detectionLatency.observe(0.02);
  const result = await execa(promtool.path ?? assert.fail(promtool.reason), ["check", "metrics"], {
    input: await metrics.text(),
    reject: false,
  });
  assert.equal(result.exitCode, 0, `promtool check metrics:\n${result.stdout}${result.stderr}`);
  assert.equal(result.stdout + result.stderr, "", "promtool check metrics printed lint findings");
});
