// The on-call dashboard, dashboards/lostwrite.json: every panel's query, unit
// and description in this one file. Rows in on-call's order: are writes being
// lost, why, is the agent healthy. `npm run dashboards` writes the JSON;
// agent/test/unit/repository/dashboardsAsCode.test.ts fails when it is stale.
import * as dashboard from "@grafana/grafana-foundation-sdk/dashboard";
import { OPERATOR_DASHBOARD_UID } from "./operator.ts";
import { row, seriesStyle, statPanel, tablePanel, timeseriesPanel } from "./panels.ts";
import { allLossSpansInTempo, exemplarTraceLinks } from "./traceLinks.ts";
import {
  AGENT,
  LOSS,
  WORKLOAD,
  clusterVariable,
  controllerVariable,
  gainedInRange,
  jaegerVariable,
  namespaceVariable,
  nodeVariable,
  prometheusVariable,
  tempoVariable,
} from "./variables.ts";

const lost = (extra = ""): string => `lostwrite_status_write_lost_total{${LOSS}${extra}}`;
const rate = (metric: string, selector: string): string => `rate(${metric}{${selector}}[$__rate_interval])`;
const lostRate = `rate(${lost()}[$__rate_interval])`;
const writesRate = rate("lostwrite_apiserver_writes_total", WORKLOAD);

const lossesNow = [
  statPanel({
    id: 2,
    title: "Lost writes/s",
    description:
      "Writes to the apiserver that did not arrive or were not answered, per second, all causes, for the selected nodes, namespaces and controllers. Anything above 0 is a write an operator believes it made. Source: lostwrite_status_write_lost_total.",
    unit: "wps",
    decimals: 2,
    steps: ["green", { from: 0.000001, color: "red" }],
    at: { x: 0, y: 1, w: 6, h: 4 },
    queries: [{ expr: `sum(${lostRate}) or vector(0)`, legend: "lost/s" }],
  }),
  statPanel({
    id: 3,
    title: "Silent losses in range",
    description:
      'Losses in the selected time range that the operator did not notice (noticed="no": its reconcile span said OK). These objects have stale status and will not be retried: page-worthy (alert LostwriteSilentStatusWriteLoss). Series created within the range count with their whole value, so a first loss is not missed.',
    unit: "short",
    decimals: 0,
    steps: ["green", { from: 0.5, color: "red" }],
    at: { x: 6, y: 1, w: 6, h: 4 },
    queries: [{ expr: `sum (${gainedInRange(lost(', noticed="no"'))}) or vector(0)`, legend: "silent" }],
  }),
  statPanel({
    id: 4,
    title: "Loss ratio",
    description:
      "Lost writes divided by successful apiserver writes (lostwrite_apiserver_writes_total) of the watched processes. The denominator has no controller label, so with a controller selected this is that controller's share of all writes of the selected namespaces. No alert pages on this ratio: LostwriteSilentStatusWriteLoss pages on any silent loss, LostwriteApiserverWriteFailureRatioHigh on more than 1 % failed sends per pod.",
    unit: "percentunit",
    decimals: 2,
    steps: ["green", { from: 0.001, color: "orange" }, { from: 0.01, color: "red" }],
    at: { x: 12, y: 1, w: 6, h: 4 },
    queries: [{ expr: `(sum(${lostRate}) or vector(0)) / sum(${writesRate})`, legend: "ratio" }],
  }),
  statPanel({
    id: 5,
    title: "Watched processes",
    description:
      "Processes the agents on the selected nodes watch now. 0 means lostwrite sees nothing: every loss panel reads 0 however bad things are. Source: lostwrite_targets.",
    unit: "short",
    decimals: 0,
    steps: ["red", { from: 1, color: "green" }],
    at: { x: 18, y: 1, w: 6, h: 4 },
    queries: [{ expr: `sum(lostwrite_targets{${AGENT}})`, legend: "watched" }],
  }),
  timeseriesPanel({
    id: 6,
    title: "Lost writes/s by controller and cause",
    description:
      "Who is losing writes and how. One line per namespace, controller and cause (write_failed, zero_byte_write, connect_failed, connection_reset, connection_closed_unanswered, http_rejected). Exemplars (dots: the agent's latest loss per series, with trace_id and span_id) link to the operator's trace containing the 'status write lost' span; they need Prometheus's exemplar storage (docs/install.md, Trace links).",
    unit: "wps",
    at: { x: 0, y: 5, w: 12, h: 8 },
    queries: [{ expr: `sum by (namespace, controller, cause) (${lostRate})`, legend: "{{namespace}}/{{controller}} {{cause}}", exemplar: true }],
    overrides: [exemplarTraceLinks],
    links: [allLossSpansInTempo],
  }),
  timeseriesPanel({
    id: 7,
    title: "Silent vs noticed losses/s",
    description:
      "Lost writes by whether the operator noticed: no = its span said OK (silent, worst: never retried), yes = its span recorded the error (retried by the work queue), unknown = no span to compare with (operator not instrumented or span not received).",
    unit: "wps",
    at: { x: 12, y: 5, w: 12, h: 8 },
    queries: [{ expr: `sum by (noticed) (${lostRate})`, legend: "{{noticed}}", exemplar: true }],
    overrides: [
      seriesStyle("no", "red", "silent (noticed=no)"),
      seriesStyle("yes", "orange", "noticed (yes)"),
      seriesStyle("unknown", "blue"),
      exemplarTraceLinks,
    ],
    links: [allLossSpansInTempo],
  }),
  timeseriesPanel({
    id: 8,
    title: "Loss ratio by pod",
    description:
      "Share of each pod's successful apiserver writes that were lost (lost / lostwrite_apiserver_writes_total, both per pod). The red line is 1 %, the level of LostwriteApiserverWriteFailureRatioHigh, which compares a pod's failed sends (not its losses) with its writes.",
    unit: "percentunit",
    thresholdLine: ["green", { from: 0.01, color: "red" }],
    at: { x: 0, y: 13, w: 12, h: 8 },
    queries: [
      {
        expr: `sum by (cluster, namespace, pod) (${lostRate}) / sum by (cluster, namespace, pod) (${writesRate})`,
        legend: "{{namespace}}/{{pod}}",
      },
    ],
  }),
  tablePanel({
    id: 9,
    title: "Losses in range by workload",
    description:
      "Every workload that lost writes in the selected time range, with cause, errno and whether it was noticed. For object names and trace ids of individual losses use `lostwrite tail` against the agent on the node (see docs/runbooks.md).",
    unit: "short",
    decimals: 0,
    at: { x: 12, y: 13, w: 12, h: 8 },
    queries: [
      {
        expr: `sum by (node, namespace, pod, controller, request, cause, errno, noticed) (${gainedInRange(lost())}) > 0`,
        legend: "__auto",
      },
    ],
    links: [allLossSpansInTempo],
    rowLinks: [
      {
        title: "This operator: its losses, requests and traces",
        // The variables both dashboards have carry over; the row's namespace and pod pick the operator.
        url: `/d/${OPERATOR_DASHBOARD_UID}?\${datasource:queryparam}&\${cluster:queryparam}&\${tempo:queryparam}&\${jaeger:queryparam}&var-namespace=\${__data.fields.namespace}&var-pod=\${__data.fields.pod}&\${__url_time_range}`,
      },
    ],
    transformations: [{ id: "organize", options: { excludeByName: { Time: true }, renameByName: { Value: "lost in range" } } }],
  }),
];

const why = [
  timeseriesPanel({
    id: 11,
    title: "Lost writes/s by errno",
    description:
      "The kernel's errno of the failing syscall behind each loss (EPIPE, ECONNRESET, ETIMEDOUT, ECONNREFUSED, ...). Empty errno: the connection died with a request unanswered and no syscall failed (see connection losses).",
    unit: "wps",
    at: { x: 0, y: 22, w: 12, h: 8 },
    queries: [{ expr: `sum by (errno) (${lostRate})`, legend: "{{errno}}", exemplar: true }],
    overrides: [exemplarTraceLinks],
  }),
  timeseriesPanel({
    id: 12,
    title: "Failed apiserver syscalls/s by syscall and errno",
    description:
      "Every failed or zero-byte write-family or connect syscall on an apiserver socket, before correlation decides whether it lost a write. Source: lostwrite_apiserver_syscall_errors_total.",
    unit: "ops",
    at: { x: 12, y: 22, w: 12, h: 8 },
    queries: [{ expr: `sum by (syscall, errno) (${rate("lostwrite_apiserver_syscall_errors_total", WORKLOAD)})`, legend: "{{syscall}} {{errno}}" }],
  }),
  timeseriesPanel({
    id: 13,
    title: "Connect failures/s by node",
    description:
      "Connections to the apiserver that could not be opened, by node and errno (losses with cause connect_failed), and connect() syscalls that failed outright. A whole node failing points at its path to the apiserver (kube-proxy, routes, load balancer). Alert: LostwriteApiserverConnectFailures.",
    unit: "ops",
    at: { x: 0, y: 30, w: 8, h: 8 },
    queries: [
      { expr: `sum by (node, errno) (rate(${lost(', cause="connect_failed"')}[$__rate_interval]))`, legend: "connect failed {{node}} {{errno}}" },
      {
        expr: `sum by (node, errno) (${rate("lostwrite_apiserver_syscall_errors_total", `${WORKLOAD}, syscall="connect"`)})`,
        legend: "connect() error {{node}} {{errno}}",
      },
    ],
  }),
  timeseriesPanel({
    id: 14,
    title: "Apiserver connections lost/s by reason",
    description:
      "Apiserver connections that died: reset (RST or socket error) and timeout, with or without a request in flight; closed_unanswered: closed cleanly by the apiserver with a request written and never answered; closed_by_client: the client closed it first (its own timeout) with a request unanswered. Clean closes of idle connections are normal and not shown. Source: lostwrite_apiserver_connection_losses_total.",
    unit: "ops",
    at: { x: 8, y: 30, w: 8, h: 8 },
    queries: [{ expr: `sum by (reason) (${rate("lostwrite_apiserver_connection_losses_total", WORKLOAD)})`, legend: "{{reason}}" }],
  }),
  timeseriesPanel({
    id: 15,
    title: "TCP retransmits/s by pod",
    description:
      "TCP retransmits on apiserver connections of the watched processes: the network degrading before connections die. Source: lostwrite_apiserver_retransmits_total.",
    unit: "pps",
    at: { x: 16, y: 30, w: 8, h: 8 },
    queries: [{ expr: `sum by (namespace, pod) (${rate("lostwrite_apiserver_retransmits_total", WORKLOAD)})`, legend: "{{namespace}}/{{pod}}" }],
  }),
  timeseriesPanel({
    id: 16,
    title: "Apiserver writes/s by pod",
    description:
      "Successful write-family syscalls on apiserver sockets (for a Go operator the Go probe reads: its requests): how busy each operator is with the apiserver (the loss ratio's denominator). Source: lostwrite_apiserver_writes_total.",
    unit: "wps",
    at: { x: 0, y: 38, w: 8, h: 8 },
    queries: [{ expr: `sum by (namespace, pod) (${writesRate})`, legend: "{{namespace}}/{{pod}}" }],
  }),
  timeseriesPanel({
    id: 17,
    title: "Apiserver write throughput by pod",
    description: "Bytes per second sent to the apiserver by successful writes. Source: lostwrite_apiserver_write_bytes_total.",
    unit: "Bps",
    at: { x: 8, y: 38, w: 8, h: 8 },
    queries: [{ expr: `sum by (namespace, pod) (${rate("lostwrite_apiserver_write_bytes_total", WORKLOAD)})`, legend: "{{namespace}}/{{pod}}" }],
  }),
  timeseriesPanel({
    id: 30,
    title: "Status writes retried/s (refused, then answered)",
    description:
      "Status writes the apiserver refused (409/422/429/5xx or a transport error) that the operator sent again in the same reconcile and got answered 2xx. Retries, not losses: they are not in the loss panels. A rising rate with no losses means the apiserver is pushing back and the operators cope. Source: lostwrite_status_write_retried_total.",
    unit: "ops",
    at: { x: 16, y: 38, w: 8, h: 8 },
    queries: [{ expr: `sum by (namespace, code) (${rate("lostwrite_status_write_retried_total", WORKLOAD)})`, legend: "{{namespace}} {{code}}" }],
  }),
];

const agentHealth = [
  statPanel({
    id: 19,
    title: "Probe up by node",
    description:
      "1 while bpftrace is attached and beating on the node. DOWN means lostwrite is blind there: no loss is detected (alert LostwriteProbeDown).",
    unit: "none",
    steps: ["red", { from: 1, color: "green" }],
    mappings: [
      {
        type: dashboard.MappingType.ValueToText,
        options: { "0": { text: "DOWN", color: "red", index: 0 }, "1": { text: "up", color: "green", index: 1 } },
      },
    ],
    at: { x: 0, y: 47, w: 8, h: 6 },
    queries: [{ expr: `max by (node, instance) (lostwrite_probe_up{${AGENT}})`, legend: "{{node}} {{instance}}" }],
  }),
  timeseriesPanel({
    id: 20,
    title: "Probe restarts by reason, changes not acknowledged, Kubernetes watch failures",
    description:
      "bpftrace restarts by the agent's supervisor in the last 15 minutes (the window of alert LostwriteProbeRestarting, which fires above 2): exited, heartbeat_missed, spawn_failed, and send_hook (restarted to attach its send hook once a target needed it, or without it once none had for 10 s). Whether the send hook is attached now (1; 0 while every target is followed per request, lostwrite_probe_send_hook): every socket send of every process on the node pays it. Go operators' connections the socket probe took over from their Go programs, having started after them (lostwrite_probe_adopted_connections_total): after each restart, one per operator connection that carried a request since. Also target or endpoint changes the probe never acknowledged after every retry (lostwrite_probe_control_failures_total): the kernel may be missing a target; /readyz fails meanwhile. And failed lists and watches of Kubernetes mode (lostwrite_kubernetes_watch_errors_total): forbidden or unauthorized means the agent's ServiceAccount lacks a permission, and the agent no longer learns of new pods or apiserver endpoints. And page-outs of bpftrace's compiler that failed (lostwrite_probe_compiler_page_outs_total): the agent's log says why; without CAP_SYS_NICE each bpftrace keeps about 50 MiB more.",
    unit: "short",
    decimals: 0,
    at: { x: 8, y: 47, w: 8, h: 6 },
    queries: [
      { expr: `sum by (node, reason) (increase(lostwrite_probe_restarts_total{${AGENT}}[15m]))`, legend: "{{node}} {{reason}}" },
      { expr: `max by (node) (lostwrite_probe_send_hook{${AGENT}})`, legend: "{{node}} send hook attached" },
      { expr: `sum by (node) (increase(lostwrite_probe_adopted_connections_total{${AGENT}}[15m]))`, legend: "{{node}} connections adopted" },
      { expr: `sum by (node) (increase(lostwrite_probe_control_failures_total{${AGENT}}[15m]))`, legend: "{{node}} change not acknowledged" },
      { expr: `sum by (node, resource, reason) (increase(lostwrite_kubernetes_watch_errors_total{${AGENT}}[15m]))`, legend: "{{node}} {{resource}} watch {{reason}}" },
      { expr: `sum by (node) (increase(lostwrite_probe_compiler_page_outs_total{${AGENT}, result="failed"}[15m]))`, legend: "{{node}} compiler page-out failed" },
    ],
  }),
  tablePanel({
    id: 21,
    title: "Probe variant by node",
    description:
      "The probe program variant the agent chose for the node's kernel, the bpftrace version running it, and what it takes for an answer (any_read: the weaker rule of the syscalls variant, see docs/metrics.md). Source: lostwrite_probe_info.",
    unit: "none",
    at: { x: 16, y: 47, w: 8, h: 6 },
    queries: [{ expr: `max by (node, variant, bpftrace_version, answer_rule) (lostwrite_probe_info{${AGENT}})`, legend: "__auto" }],
    transformations: [{ id: "organize", options: { excludeByName: { Time: true, Value: true } } }],
  }),
  timeseriesPanel({
    id: 22,
    title: "Kernel-dropped probe events and skipped probe runs/s",
    description:
      "Events the kernel dropped before bpftrace read them: any drop means losses may be undercounted on that node (alert LostwriteKernelDroppingEvents). Skipped runs: probe hits the kernel did not run a program for because another BPF program was running on that CPU; a skipped connection close is still reported (from the next failed send or the socket's release), a steady rate means another BPF tool on the node runs long programs. Sources: lostwrite_probe_events_lost_total, lostwrite_probe_missed_runs_total.",
    unit: "cps",
    at: { x: 0, y: 53, w: 8, h: 7 },
    queries: [
      { expr: `sum by (node) (${rate("lostwrite_probe_events_lost_total", AGENT)})`, legend: "{{node}} dropped" },
      { expr: `sum by (node, program) (${rate("lostwrite_probe_missed_runs_total", AGENT)})`, legend: "{{node}} skipped ({{program}})" },
    ],
  }),
  timeseriesPanel({
    id: 23,
    title: "Probe parse errors/s",
    description:
      "bpftrace output lines the agent could not parse (malformed, oversized, unknown type). Should be 0; a steady rate means the probe and the agent disagree on the output format. Source: lostwrite_probe_parse_errors_total.",
    unit: "cps",
    at: { x: 8, y: 53, w: 8, h: 7 },
    queries: [{ expr: `sum by (node) (${rate("lostwrite_probe_parse_errors_total", AGENT)})`, legend: "{{node}}" }],
  }),
  timeseriesPanel({
    id: 24,
    title: "Pipeline drops/s by stage and reason",
    description:
      "Events dropped inside the agent, by pipeline stage and reason (queue_full, capacity, slow_client, expired, invalid). Every queue is bounded: drops are the agent protecting itself (alert LostwritePipelineDroppingEvents). Source: lostwrite_events_dropped_total.",
    unit: "cps",
    at: { x: 16, y: 53, w: 8, h: 7 },
    queries: [{ expr: `sum by (node, stage, reason) (${rate("lostwrite_events_dropped_total", AGENT)})`, legend: "{{node}} {{stage}} {{reason}}" }],
  }),
  timeseriesPanel({
    id: 25,
    title: "Span intake/s",
    description:
      "OTLP spans accepted from the operators, OTLP requests rejected by reason, and refused status writes seen only in spans of senders that are no proven target process (not reported as losses). Without spans losses cannot be attributed to a reconcile and come out noticed=unknown. Sources: lostwrite_spans_received_total, lostwrite_spans_rejected_total, lostwrite_span_losses_untrusted_total.",
    unit: "cps",
    at: { x: 0, y: 60, w: 8, h: 7 },
    queries: [
      { expr: `sum by (node) (${rate("lostwrite_spans_received_total", AGENT)})`, legend: "received {{node}}" },
      { expr: `sum by (node, reason) (${rate("lostwrite_spans_rejected_total", AGENT)})`, legend: "rejected {{node}} {{reason}}" },
      { expr: `sum by (node) (${rate("lostwrite_span_losses_untrusted_total", AGENT)})`, legend: "untrusted span losses {{node}}" },
    ],
  }),
  timeseriesPanel({
    id: 26,
    title: "Span index",
    description:
      "Spans held in the bounded span index that losses are joined with, and evictions per second by reason (age: too old to match; capacity: index full, losses may miss their span); the OTLP connections whose sending process is remembered. Sources: lostwrite_span_index_spans, lostwrite_span_index_evictions_total, lostwrite_span_sender_connections.",
    unit: "short",
    at: { x: 8, y: 60, w: 8, h: 7 },
    queries: [
      { expr: `sum by (node) (lostwrite_span_index_spans{${AGENT}})`, legend: "held {{node}}" },
      { expr: `sum by (node, reason) (${rate("lostwrite_span_index_evictions_total", AGENT)})`, legend: "evicted/s {{node}} {{reason}}" },
      { expr: `sum by (node) (lostwrite_span_sender_connections{${AGENT}})`, legend: "sender connections {{node}}" },
    ],
  }),
  timeseriesPanel({
    id: 27,
    title: "Detection latency",
    description:
      "Time from the kernel timestamp of a failure to the loss event leaving the agent, p50 and p99 over all selected nodes. High values mean losses wait long for spans or the agent is starved. Source: lostwrite_detection_latency_seconds.",
    unit: "s",
    at: { x: 16, y: 60, w: 8, h: 7 },
    queries: [
      { expr: `histogram_quantile(0.5, sum by (le) (${rate("lostwrite_detection_latency_seconds_bucket", AGENT)}))`, legend: "p50" },
      { expr: `histogram_quantile(0.99, sum by (le) (${rate("lostwrite_detection_latency_seconds_bucket", AGENT)}))`, legend: "p99" },
    ],
  }),
  timeseriesPanel({
    id: 28,
    title: "Queue length",
    description:
      "Events waiting in each bounded pipeline queue. A queue sitting at its capacity is the bottleneck behind queue_full drops. Source: lostwrite_queue_length.",
    unit: "short",
    at: { x: 0, y: 67, w: 12, h: 7 },
    queries: [{ expr: `max by (node, queue) (lostwrite_queue_length{${AGENT}})`, legend: "{{node}} {{queue}}" }],
  }),
  statPanel({
    id: 29,
    title: "Live feed clients",
    description: "WebSocket clients connected to /events (for example `lostwrite tail`) on the selected nodes. Source: lostwrite_feed_clients.",
    unit: "short",
    decimals: 0,
    steps: ["blue"],
    at: { x: 12, y: 67, w: 12, h: 7 },
    queries: [{ expr: `sum(lostwrite_feed_clients{${AGENT}})`, legend: "clients" }],
  }),
  timeseriesPanel({
    id: 31,
    title: "Uprobe programs: Go requests and TLS answers attached, Go targets followed, restarts",
    description:
      "Uprobe programs the agent runs. Go: operators whose HTTP/2 client is followed request by request (uprobes on their binary): programs attached, targets covered, restarts; a Go target not counted is on the socket path alone (the agent logs why once per binary). TLS: one program per OpenSSL file (a libssl, or node with OpenSSL linked in) whose targets' connections are judged by what SSL_read returned, so a TLS 1.3 session ticket is no answer; without one, answers are read on the wire. A new file's program starts at once in a bpftrace of its own; the programs, Go's and TLS's, are merged into one bpftrace once the files have not changed for a minute (merges), made while the old ones run on.",
    unit: "short",
    decimals: 0,
    at: { x: 0, y: 74, w: 12, h: 7 },
    queries: [
      { expr: `sum by (node) (lostwrite_go_probes_attached{${AGENT}})`, legend: "{{node}} Go programs attached" },
      { expr: `sum by (node) (lostwrite_go_targets{${AGENT}, coverage="requests"})`, legend: "{{node}} targets followed per request" },
      { expr: `sum by (node, reason) (increase(lostwrite_go_probe_restarts_total{${AGENT}}[$__rate_interval]))`, legend: "{{node}} Go restarts ({{reason}})" },
      { expr: `sum by (node) (lostwrite_tls_probes_attached{${AGENT}})`, legend: "{{node}} TLS programs attached" },
      { expr: `sum by (node, reason) (increase(lostwrite_tls_probe_restarts_total{${AGENT}}[$__rate_interval]))`, legend: "{{node}} TLS restarts ({{reason}})" },
      { expr: `sum by (node, reason) (increase(lostwrite_uprobe_program_reloads_total{${AGENT}}[$__rate_interval]))`, legend: "{{node}} merges ({{reason}})" },
    ],
  }),
  timeseriesPanel({
    id: 32,
    title: "Memory bpftrace gave back: its compiler paged out",
    description:
      "What the agent's bpftrace processes gave back since the agent started, by having the LLVM and clang code they ran to compile (about 50 MiB each) paged out once their program attached. It grows with each bpftrace started (a restart, a new probed file, a merge). Flat at 0 on a node with bpftrace running means the page-out fails there (see the failures on the restarts panel). Source: lostwrite_probe_compiler_paged_out_bytes_total.",
    unit: "bytes",
    at: { x: 12, y: 74, w: 12, h: 7 },
    queries: [{ expr: `sum by (node) (lostwrite_probe_compiler_paged_out_bytes_total{${AGENT}})`, legend: "{{node}}" }],
  }),
];

export function lostwriteDashboard(): dashboard.Dashboard {
  const builder = new dashboard.DashboardBuilder("lostwrite: lost apiserver writes")
    .uid("lostwrite")
    .id(null)
    .description(
      "Status writes Kubernetes operators lose on the way to the kube-apiserver, seen from the kernel by the lostwrite agent. Rows in on-call order: are writes lost, why, is the agent healthy. Metrics: docs/metrics.md; alerts and runbooks: dashboards/alerts.yaml, docs/runbooks.md.",
    )
    .tags(["lostwrite", "kubernetes", "operators"])
    .editable()
    .tooltip(dashboard.DashboardCursorSync.Crosshair)
    .refresh("30s")
    .time({ from: "now-1h", to: "now" })
    .timezone("")
    .version(1)
    .annotation(
      new dashboard.AnnotationQueryBuilder()
        .name("Annotations & Alerts")
        .builtIn(1)
        .type("dashboard")
        .datasource({ type: "grafana", uid: "-- Grafana --" })
        .enable(true)
        .hide(true)
        .iconColor("rgba(0, 211, 255, 1)"),
    )
    .variables([prometheusVariable, clusterVariable, nodeVariable, namespaceVariable, controllerVariable, tempoVariable, jaegerVariable])
    .withRow(row(1, "Are status writes being lost right now? Where, how badly?", 0));
  for (const p of lossesNow) builder.withPanel(p);
  builder.withRow(row(10, "Why? Errors, connections, network", 21));
  for (const p of why) builder.withPanel(p);
  builder.withRow(row(18, "Is the agent healthy?", 46));
  for (const p of agentHealth) builder.withPanel(p);
  return builder.build();
}
