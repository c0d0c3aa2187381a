// The drill-down for one operator, dashboards/lostwrite-operator.json: what
// on-call opens from a row of "Losses in range by workload" on the on-call
// dashboard. Its losses (with the trace of each), then its requests to the
// apiserver: how busy it is, what failed under it, what it retried.
import * as dashboard from "@grafana/grafana-foundation-sdk/dashboard";
import { row, statPanel, tablePanel, timeseriesPanel } from "./panels.ts";
import { allLossSpansInTempo, exemplarTraceLinks } from "./traceLinks.ts";
import { clusterVariable, gainedInRange, jaegerVariable, labelValues, prometheusVariable, tempoVariable } from "./variables.ts";

export const OPERATOR_DASHBOARD_UID = "lostwrite-operator";

/** The operator's pods: every workload metric has these labels. */
const PODS = `cluster=~"$cluster", namespace=~"$namespace", pod=~"$pod"`;
const LOSSES = `${PODS}, controller=~"$controller"`;
const lost = (extra = ""): string => `lostwrite_status_write_lost_total{${LOSSES}${extra}}`;
const rate = (metric: string, selector: string): string => `rate(${metric}{${selector}}[$__rate_interval])`;
const lostRate = rate("lostwrite_status_write_lost_total", LOSSES);
const writesRate = rate("lostwrite_apiserver_writes_total", PODS);

const namespaceVariable = labelValues(
  "namespace",
  "Namespace",
  "The operator's namespace (the agent's namespace label names the watched operator's).",
  `lostwrite_apiserver_writes_total{cluster=~"$cluster"}`,
  { multi: false, pickOne: true },
);
const podVariable = labelValues(
  "pod",
  "Pod",
  "The operator's pods in that namespace; All for every replica.",
  `lostwrite_apiserver_writes_total{cluster=~"$cluster", namespace=~"$namespace"}`,
  { multi: true },
);
const controllerVariable = labelValues(
  "controller",
  "Controller",
  "Controllers of those pods that lost writes. Only lostwrite_status_write_lost_total carries it: the request panels ignore it.",
  `lostwrite_status_write_lost_total{cluster=~"$cluster", namespace=~"$namespace", pod=~"$pod"}`,
  { multi: true },
);

const losses = [
  statPanel({
    id: 2,
    title: "Lost writes in range",
    description:
      "Writes of this operator to the apiserver that did not arrive or were not answered, in the selected time range, all causes. Series created within the range count whole, so a first loss is not missed. Source: lostwrite_status_write_lost_total.",
    unit: "short",
    decimals: 0,
    steps: ["green", { from: 0.5, color: "red" }],
    at: { x: 0, y: 1, w: 8, h: 4 },
    queries: [{ expr: `sum (${gainedInRange(lost())}) or vector(0)`, legend: "lost" }],
  }),
  statPanel({
    id: 3,
    title: "Silent losses in range",
    description:
      'Of those, the losses the operator did not notice (noticed="no": its reconcile span said OK): objects whose status is stale and that will not be retried (alert LostwriteSilentStatusWriteLoss).',
    unit: "short",
    decimals: 0,
    steps: ["green", { from: 0.5, color: "red" }],
    at: { x: 8, y: 1, w: 8, h: 4 },
    queries: [{ expr: `sum (${gainedInRange(lost(', noticed="no"'))}) or vector(0)`, legend: "silent" }],
  }),
  statPanel({
    id: 4,
    title: "Loss ratio",
    description:
      "Lost writes divided by the operator's successful apiserver writes (lostwrite_apiserver_writes_total), over the last rate interval. The denominator has no controller label: with a controller selected, its share of all the pods' writes.",
    unit: "percentunit",
    decimals: 2,
    steps: ["green", { from: 0.001, color: "orange" }, { from: 0.01, color: "red" }],
    at: { x: 16, y: 1, w: 8, h: 4 },
    queries: [{ expr: `(sum(${lostRate}) or vector(0)) / sum(${writesRate})`, legend: "ratio" }],
  }),
  timeseriesPanel({
    id: 5,
    title: "Lost writes/s by controller, cause and noticed",
    description:
      "This operator's losses over time. Exemplars (dots: the latest loss per series, with trace_id and span_id) link to the operator's trace containing the 'status write lost' span; they need Prometheus's exemplar storage (docs/install.md, Trace links).",
    unit: "wps",
    at: { x: 0, y: 5, w: 12, h: 9 },
    queries: [{ expr: `sum by (controller, cause, noticed) (${lostRate})`, legend: "{{controller}} {{cause}} noticed={{noticed}}", exemplar: true }],
    overrides: [exemplarTraceLinks],
    links: [allLossSpansInTempo],
  }),
  tablePanel({
    id: 6,
    title: "Losses in range by pod, controller and cause",
    description:
      "Every kind of loss this operator had in the selected range, with the request (status or other), errno and whether it noticed. Object names and trace ids of single losses: `lostwrite tail` against the agent on the pod's node (docs/runbooks.md).",
    unit: "short",
    decimals: 0,
    at: { x: 12, y: 5, w: 12, h: 9 },
    queries: [{ expr: `sum by (node, pod, controller, request, cause, errno, noticed) (${gainedInRange(lost())}) > 0`, legend: "__auto" }],
    links: [allLossSpansInTempo],
    transformations: [{ id: "organize", options: { excludeByName: { Time: true }, renameByName: { Value: "lost in range" } } }],
  }),
];

const requests = [
  timeseriesPanel({
    id: 8,
    title: "Apiserver writes/s by pod",
    description:
      "Successful write-family syscalls on apiserver sockets (for a Go operator the Go probe reads: its requests): how busy the operator is with the apiserver. Source: lostwrite_apiserver_writes_total.",
    unit: "wps",
    at: { x: 0, y: 15, w: 12, h: 8 },
    queries: [{ expr: `sum by (pod) (${writesRate})`, legend: "{{pod}}" }],
  }),
  timeseriesPanel({
    id: 9,
    title: "Failed apiserver syscalls/s by syscall and errno",
    description:
      "The operator's failed or zero-byte sends and connects on apiserver sockets, before correlation decides whether each lost a write. Source: lostwrite_apiserver_syscall_errors_total.",
    unit: "ops",
    at: { x: 12, y: 15, w: 12, h: 8 },
    queries: [{ expr: `sum by (pod, syscall, errno) (${rate("lostwrite_apiserver_syscall_errors_total", PODS)})`, legend: "{{pod}} {{syscall}} {{errno}}" }],
  }),
  timeseriesPanel({
    id: 10,
    title: "Apiserver connections lost/s by reason",
    description:
      "The operator's apiserver connections that died: reset, timeout, closed_unanswered (closed by the apiserver with a request unanswered), closed_by_client (the operator gave up first). Source: lostwrite_apiserver_connection_losses_total.",
    unit: "ops",
    at: { x: 0, y: 23, w: 8, h: 8 },
    queries: [{ expr: `sum by (pod, reason) (${rate("lostwrite_apiserver_connection_losses_total", PODS)})`, legend: "{{pod}} {{reason}}" }],
  }),
  timeseriesPanel({
    id: 11,
    title: "Status writes retried/s by code",
    description:
      "Status writes the apiserver refused that the operator sent again and got answered 2xx (code: the refusal; goaway and refused_stream: Go's HTTP/2 client resent them by itself). Retries, not losses. Source: lostwrite_status_write_retried_total.",
    unit: "ops",
    at: { x: 8, y: 23, w: 8, h: 8 },
    queries: [{ expr: `sum by (pod, code) (${rate("lostwrite_status_write_retried_total", PODS)})`, legend: "{{pod}} {{code}}" }],
  }),
  timeseriesPanel({
    id: 12,
    title: "TCP retransmits/s by pod",
    description: "TCP retransmits on the operator's apiserver connections: the network degrading before connections die. Source: lostwrite_apiserver_retransmits_total.",
    unit: "pps",
    at: { x: 16, y: 23, w: 8, h: 8 },
    queries: [{ expr: `sum by (pod) (${rate("lostwrite_apiserver_retransmits_total", PODS)})`, legend: "{{pod}}" }],
  }),
];

export function operatorDashboard(): dashboard.Dashboard {
  const builder = new dashboard.DashboardBuilder("lostwrite: one operator")
    .uid(OPERATOR_DASHBOARD_UID)
    .id(null)
    .description(
      "One operator's lost apiserver writes, with the trace of each, and its requests to the apiserver. Opened from the on-call dashboard (dashboards/lostwrite.json). Metrics: docs/metrics.md.",
    )
    .tags(["lostwrite", "kubernetes", "operators"])
    .editable()
    .tooltip(dashboard.DashboardCursorSync.Crosshair)
    .refresh("30s")
    .time({ from: "now-6h", to: "now" })
    .timezone("")
    .version(1)
    .variables([prometheusVariable, clusterVariable, namespaceVariable, podVariable, controllerVariable, tempoVariable, jaegerVariable])
    .withRow(row(1, "What did this operator lose?", 0));
  for (const p of losses) builder.withPanel(p);
  builder.withRow(row(7, "Its requests to the apiserver", 14));
  for (const p of requests) builder.withPanel(p);
  return builder.build();
}
