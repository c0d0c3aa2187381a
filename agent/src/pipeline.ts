// The agent's data path, built in one place. Read top to bottom:
//
//   sources                          named queues                loss graph          sinks
//   socket probe ─► exec admission ─► probeToCorrelator ─┐
//   TLS programs (verdicts) ─────────► probeToCorrelator ─┼─► LossGraph ─────────► loss metrics (Prometheus)
//   Go programs (lines) ──────────────────────────────────┤   (lossGraph/:        event log, /events feed,
//   OTLP spans ──────────────────────► spansToCorrelator ─┘    one clock)          trace export, listeners
//                                                              │
//   targets, apiserver endpoints ─► the probes' filters ◄──────┘ request-level switch
//   Go programs' connection sockets ─► the socket probe (adoptedConnections.ts)
//
// Each part is built before it is used: sources that say what is watched,
// the sinks, the loss graph (shared with `lostwrite replay`), the queues into
// it, the probes and the span intake that write into those queues; then
// who tells whom about changes; then the stages, started in order and
// stopped in reverse, also when start-up fails half-way. Queues are bounded
// and their drops counted.
import {
  clockStage,
  eventLogSinks,
  FeedStage,
  HttpStage,
  kubernetesStage,
  kubernetesTargets,
  ListenerSink,
  openRecorder,
  OtlpStage,
  pickProbeVariant,
  probeReadiness,
  TraceStage,
  watchTargets,
} from "./agentStages.ts";
import { BoundedQueue } from "./boundedQueue.ts";
import type { Config } from "./config.ts";
import { MonotonicClock } from "./correlate/monotonicClock.ts";
import { parseHostPort, type HostPort } from "./hostPort.ts";
import { GraphClock } from "./lossGraph/graphClock.ts";
import { liveClockStage } from "./lossGraph/liveClock.ts";
import { LossGraph } from "./lossGraph/lossGraph.ts";
import type { LossEvent } from "./model.ts";
import { LossMetricsSink } from "./sinks/lossMetrics.ts";
import { LossSinks, startStages, stage, type Stage } from "./stage.ts";
import type { Logger } from "./telemetry/log.ts";
import { AgentMetrics } from "./telemetry/metrics.ts";
import { GoConnectionSockets } from "./sources/probe/adoptedConnections.ts";
import { BpftraceSupervisor } from "./sources/probe/bpftraceSupervisor.ts";
import { CompilerPages, pageoutHelper } from "./sources/probe/compilerPages.ts";
import { parseEndpoint } from "./sources/probe/endpointKey.ts";
import { EndpointSync } from "./sources/probe/endpointSync.ts";
import type { ProbeRecord } from "./sources/probe/probeOutput.ts";
import type { ProbeVariant } from "./sources/probe/probeProgram.ts";
import { ProbeRecordRoute } from "./sources/probe/probeRecordRoute.ts";
import type { IndexedSpan } from "./sources/spans/indexedSpans.ts";
import { readAgentIdentity } from "./sources/targets/agentIdentity.ts";
import { ExecAdmission } from "./sources/targets/execAdmission.ts";
import { newProgramsCanMatch } from "./sources/targets/targetRules.ts";
import { TargetSync } from "./sources/targets/targetSync.ts";
import type { TlsAttachment } from "./sources/tls/tlsAnswers.ts";
import { UprobeSources } from "./sources/uprobeSources.ts";

export interface RunningAgent {
  metrics: AgentMetrics;
  variant: ProbeVariant;
  /** Where /metrics, /healthz, /readyz and /events answer. */
  listen: HostPort;
  otlp: HostPort;
  /** Where OTLP/gRPC is received; null when turned off. */
  otlpGrpc: HostPort | null;
  /** Subscribe to emitted loss events (in-process consumers: demo, tests). */
  onLoss(listener: (event: LossEvent) => void): void;
  close(): Promise<void>;
}

interface StartOptions {
  /** Where loss events go as JSON lines; null for none (the demo draws its own screen). Default stdout. */
  eventLog?: NodeJS.WritableStream | null;
}

export async function startAgent(config: Config, log: Logger, options: StartOptions = {}): Promise<RunningAgent> {
  const metrics = new AgentMetrics();
  const variant = await pickProbeVariant(config, metrics, log);
  const clock = new MonotonicClock();
  const recorder = await openRecorder(config, clock, metrics, log);

  // --- sources of what is watched: target processes, apiserver endpoints -------
  const kube = config.kubernetes ? await kubernetesTargets(config, metrics, log) : null;
  // Host pids, also in a pod: what bpftrace reports and the host /proc lists.
  const self = readAgentIdentity(config["proc-root"]);
  const targets = watchTargets(config, kube, self, recorder, metrics, log);
  const endpoints = new EndpointSync(config.apiserver.map(parseEndpoint), log);

  // --- sinks: where a loss event goes, the loss metrics first ------------------
  const http = new HttpStage(parseHostPort(config.listen, "listen"), metrics);
  const feed = new FeedStage(http, metrics);
  const traces = new TraceStage(metrics, log);
  const listeners = new ListenerSink();
  const eventLog = eventLogSinks(options.eventLog === undefined ? process.stdout : options.eventLog, metrics);
  const sinks = new LossSinks([new LossMetricsSink(metrics, targets), ...eventLog, feed, traces, listeners]);

  // --- the loss graph (shared with replay), and the queues into it ---------------
  const graph = new LossGraph({
    config, metrics, clock, time: new GraphClock(process.hrtime.bigint()), processes: targets, apiservers: endpoints,
    goRequests: config["go-probes"], requestLevelSends: variant === "sockets", sink: sinks,
  });
  // bpftrace output is read as fast as it comes; the queues absorb bursts.
  const probeRecords = new BoundedQueue<ProbeRecord | TlsAttachment>({ name: "probeToCorrelator", capacity: 65536, metrics, consume: graph.addRecord });
  const spans = new BoundedQueue<IndexedSpan[]>({ name: "spansToCorrelator", capacity: 1024, metrics, consume: graph.addSpans });

  // --- sources of records: the probes and the span intake, into the queues -------
  // A span's process is the one holding its connection; in Kubernetes mode its pod is also its address's (sources/spans/senderTrust.ts).
  const otlp = new OtlpStage(config, metrics, recorder, spans.push, () => kube?.senders() ?? null, targets, log);
  // The Go operators' connections as their Go programs found them: the socket probe adopts each.
  const goConnections = new GoConnectionSockets(() => metrics.eventsDropped.inc({ stage: "go_connections", reason: "capacity" }));
  // Every bpftrace's compiler paged out once it attached; they compile in turn for that.
  const compilerPages = new CompilerPages({ helper: pageoutHelper(), metrics, log });
  const probe = new BpftraceSupervisor({
    variant, bpftrace: config.bpftrace, metrics, log, agentHostPid: self.hostPid, compilerPages,
    goConnections: (pid) => goConnections.list(pid),
    // With rules that can match a program started later, every exec is traced at once.
    state: () => ({ targets: targets.pids(), requestLevel: graph.requestLevelPids(), endpoints: endpoints.current(), execWatch: newProgramsCanMatch(config), sendHookForRules: config["send-hook"] === "rules", unansweredMinBytes: config["unanswered-min-bytes"] }),
    ...(recorder ? { onLine: (line: string) => recorder.probeLine(line) } : {}),
    onInstance: () => graph.newProbeInstance(),
  });
  const uprobes = new UprobeSources({ config, agentHostPid: self.hostPid, compilerPages, isTarget: (pid) => targets.identity(pid) !== undefined, goLines: graph, goConnections, records: probeRecords, recorder, metrics, log });
  const removeFromKernel = async (pid: number): Promise<void> => {
    await probe.removeTarget(pid);
    await uprobes.unfollow(pid);
  };
  const admission = new ExecAdmission({ targets, removeFromKernel, procRoot: config["proc-root"], metrics, log });
  probe.onRecord(new ProbeRecordRoute(admission, uprobes.tls, probeRecords).take);

  // --- who tells whom about changes ---------------------------------------------
  new TargetSync({ targets, kernel: probe, admission, syscallCounterKeys: (pid) => graph.syscallCounterKeys(pid), forgetBaselines: (pid) => graph.forgetCounters(pid), metrics, log });
  uprobes.followTargets(targets);
  endpoints.onChange((key, present) => probe.setEndpoint(key, present));
  graph.onRequestLevel((pid, on) => void probe.setRequestLevel(pid, on));
  goConnections.onFound((connection) => void probe.adoptConnection(connection));
  if (recorder) graph.onGoAttached((pid, attached, atNs) => recorder.goAttached(pid, attached, attached ? atNs : undefined));
  http.readyWhen(probeReadiness(probe));

  // --- start in this order, stop in reverse ----------------------------------------
  const stages: Stage[] = [
    ...(recorder ? [stage("recorder", () => {}, () => recorder.close())] : []),
    clockStage(clock, recorder),
    http,
    feed,
    traces,
    liveClockStage(graph, { goQueueGauge: config["go-probes"], metrics }),
    otlp,
    ...(kube ? [kubernetesStage(kube, targets, endpoints, log)] : []),
    ...uprobes.channelStages(),
    stage("target scan", () => targets.scan()),
    probe,
    ...uprobes.programStages(),
    stage("target rescan", () => targets.start(config["rescan-interval"]), () => targets.stop()),
  ];
  const close = await startStages(stages, log);
  log.info("agent ready", { listen: http.address, otlp: otlp.address, otlpGrpc: otlp.grpcAddress, targets: targets.pids().length, apiservers: endpoints.current().map((e) => e.text) });
  return { metrics, variant, listen: http.address, otlp: otlp.address, otlpGrpc: otlp.grpcAddress, onLoss: (listener) => listeners.add(listener), close };
}
