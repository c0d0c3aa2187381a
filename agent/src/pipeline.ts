// The agent's data path, built in one place. Read top to bottom:
//
//   targets ──► probe (bpftrace, in-kernel filters) ──► exec admission ──► judge ──► correlate ──► sinks
//   OTLP spans ─────────────────────────────────────────────────────────────────────► correlate
//
// Sources and stages are built first, then wired (who tells whom about what),
// then started as a declared list of stages, in order; teardown stops them in
// reverse, also when start-up fails half-way. Stages talk through bounded
// queues whose drops are counted. A new source is one more entry in the list.
import { execa } from "execa";
import {
  clockStage,
  FeedStage,
  HttpStage,
  kubernetesStage,
  kubernetesTargets,
  ListenerSink,
  openRecorder,
  OtlpStage,
  TraceStage,
} from "./agentStages.ts";
import { BoundedQueue } from "./boundedQueue.ts";
import type { Config } from "./config.ts";
import { MonotonicClock } from "./correlate/monotonicClock.ts";
import { parseHostPort, type HostPort } from "./hostPort.ts";
import { GraphClock } from "./lossGraph/graphClock.ts";
import { liveClockStage } from "./lossGraph/liveClock.ts";
import { LossGraph } from "./lossGraph/lossGraph.ts";
import type { LossEvent } from "./model.ts";
import { ANSWER_RULES } from "./vocabulary/answerRules.ts";
import { LossSinks, startStages, stage, type LossSink, type Stage } from "./stage.ts";
import { createEventLog } from "./sinks/eventLog.ts";
import type { Logger } from "./telemetry/log.ts";
import { AgentMetrics } from "./telemetry/metrics.ts";
import { BpftraceSupervisor } from "./sources/probe/bpftraceSupervisor.ts";
import { parseEndpoint } from "./sources/probe/endpointKey.ts";
import { GoProbes } from "./sources/goHttp2/goProbes.ts";
import { TlsProbes } from "./sources/tls/tlsProbes.ts";
import { TLS_TRACEPOINT } from "./sources/tls/tlsProbeProgram.ts";
import { EndpointSync } from "./sources/probe/endpointSync.ts";
import { FollowChannel } from "./sources/probe/followChannel.ts";
import type { ProbeRecord } from "./sources/probe/probeOutput.ts";
import type { TlsAttachment } from "./sources/tls/tlsAnswers.ts";
import { chooseVariant, tracepointAvailable, type ProbeVariant } from "./sources/probe/probeProgram.ts";
import type { IndexedSpan } from "./sources/spans/indexedSpans.ts";
import { readAgentIdentity } from "./sources/targets/agentIdentity.ts";
import { ExecAdmission } from "./sources/targets/execAdmission.ts";
import { newProgramsCanMatch } from "./sources/targets/targetRules.ts";
import { TargetSync } from "./sources/targets/targetSync.ts";
import { TargetWatcher } from "./sources/targets/targetWatcher.ts";

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

/** "0.17.0" from "bpftrace v0.17.0"; "unknown" when it cannot be run (start-up then fails with the reason). */
async function readBpftraceVersion(bpftrace: string): Promise<string> {
  try {
    const { stdout } = await execa(bpftrace, ["--version"]);
    return /v?(\d+\.\d+\.\d+)/.exec(stdout)?.[1] ?? "unknown";
  } catch {
    return "unknown";
  }
}

export interface StartOptions {
  /** Where loss events go as JSON lines; null for none (the demo draws its own screen). Default stdout. */
  eventLog?: NodeJS.WritableStream | null;
}

export async function startAgent(config: Config, log: Logger, options: StartOptions = {}): Promise<RunningAgent> {
  const metrics = new AgentMetrics();
  const variant = config["probe-variant"] === "auto" ? chooseVariant() : config["probe-variant"];
  const bpftraceVersion = await readBpftraceVersion(config.bpftrace);
  metrics.probeInfo.set({ variant, bpftrace_version: bpftraceVersion, answer_rule: ANSWER_RULES[variant] }, 1);
  log.info("probe variant chosen", { variant, bpftrace: bpftraceVersion });
  const clock = new MonotonicClock();
  const recorder = await openRecorder(config, clock, metrics, log);

  // --- sinks: where a loss event goes ----------------------------------------
  const http = new HttpStage(parseHostPort(config.listen, "listen"), metrics);
  const feed = new FeedStage(http, metrics);
  const traces = new TraceStage(metrics, log);
  const listeners = new ListenerSink();
  const eventLogStream = options.eventLog === undefined ? process.stdout : options.eventLog;
  const eventLog = eventLogStream ? createEventLog(eventLogStream, { metrics }) : null;
  const sinks: LossSink[] = [
    ...(eventLog ? [{ name: "event log", publish: (event: LossEvent) => eventLog.write(event) }] : []),
    feed,
    traces,
    listeners,
  ];

  // --- sources -----------------------------------------------------------------
  const kube = config.kubernetes ? await kubernetesTargets(config, metrics, log) : null;
  // Host pids, also in a pod: what bpftrace reports and the host /proc lists.
  const self = readAgentIdentity(config["proc-root"]);
  const targets = new TargetWatcher({
    external: () => kube?.targets() ?? [],
    externalExec: (pid, comm) => kube?.admitExec(pid, comm) ?? null,
    rules: {
      pids: config["target-pid"],
      comm: config["target-comm"] ? new RegExp(config["target-comm"]) : null,
      cmdline: config["target-cmdline"] ? new RegExp(config["target-cmdline"]) : null,
      exclude: (pid) => pid === self.hostPid || pid === self.hostPpid,
    },
    procRoot: config["proc-root"],
    metrics,
    onError: (err) => log.warnRateLimited("target-scan", "target scan failed; retrying at the next scan", { error: String(err) }),
  });
  // First of its listeners, so a target is recorded before the line that made it one: replay names it alike.
  if (recorder) {
    targets.onChange((changes) => {
      for (const { pid } of changes.removed) recorder.target(pid, "", false);
      for (const { pid, identity } of changes.added) recorder.target(pid, identity.process, true);
      return Promise.resolve();
    });
  }
  const endpoints = new EndpointSync(config.apiserver.map(parseEndpoint), log);
  const isApiserver = (host: string, port: number): boolean => endpoints.has(host, port);

  // --- the loss graph (shared with replay) -------------------------------------
  const graph = new LossGraph({
    config,
    metrics,
    clock,
    time: new GraphClock(process.hrtime.bigint()),
    identity: (pid) => targets.identity(pid),
    isApiserver,
    goRequests: config["go-probes"],
    requestLevelSends: variant === "sockets",
    sink: new LossSinks(sinks),
  });
  // bpftrace output is read as fast as it comes; the queues absorb bursts.
  const probeRecords = new BoundedQueue<ProbeRecord | TlsAttachment>({ name: "probeToCorrelator", capacity: 65536, metrics, consume: (record) => graph.addRecord(record) });
  const spans = new BoundedQueue<IndexedSpan[]>({
    name: "spansToCorrelator",
    capacity: 1024,
    metrics,
    consume: (batch) => graph.addSpans(batch),
  });
  // A span's process is the one holding its connection; in Kubernetes mode its pod is also its address's (sources/spans/senderTrust.ts).
  const otlp = new OtlpStage(config, metrics, recorder, (batch) => spans.push(batch), () => kube?.senders() ?? null, targets, log);

  // --- the probe -----------------------------------------------------------------
  const probe = new BpftraceSupervisor({
    variant,
    bpftrace: config.bpftrace,
    metrics,
    log,
    agentHostPid: self.hostPid,
    // With rules that can match a program started later, every exec is traced at once.
    state: () => ({
      targets: targets.pids(),
      requestLevel: graph.requestLevelPids(),
      endpoints: endpoints.current(),
      execWatch: newProgramsCanMatch(config),
      unansweredMinBytes: config["unanswered-min-bytes"],
    }),
    ...(recorder ? { onLine: (line: string) => recorder.probeLine(line) } : {}),
    onInstance: () => graph.newProbeInstance(),
  });

  // What the per-file uprobe programs (Go requests, TLS answers) need of the
  // agent; they follow processes as the socket probe makes targets: from exec.
  const follow = new FollowChannel();
  const uprobeContext = {
    follow,
    execWatch: newProgramsCanMatch(config),
    isTarget: (pid: number) => targets.identity(pid) !== undefined,
    bpftrace: config.bpftrace,
    procRoot: config["proc-root"],
    agentHostPid: self.hostPid,
    metrics,
    log,
    // bpftrace's nsecs is CLOCK_MONOTONIC, which hrtime reads.
    nowNs: () => process.hrtime.bigint(),
  };
  const goProbes = config["go-probes"]
    ? new GoProbes({
        ...uprobeContext,
        lines: graph,
        ...(recorder ? { onLine: (line: string) => recorder.goProbeLine(line) } : {}),
      })
    : null;

  // OpenSSL clients' connections are judged by what SSL_read returned: a TLS
  // 1.3 session ticket arriving after the first request is no answer. The TLS
  // program ties an SSL object to its socket on sock:sock_send_length (Linux
  // 6.3+): on older kernels bpftrace refuses it, so it is not started at all.
  const tlsTracepoint = tracepointAvailable(TLS_TRACEPOINT);
  if (config["tls-probes"] && !tlsTracepoint) {
    log.warn("TLS answers need the kernel's sock:sock_send_length tracepoint (Linux 6.3+), which this kernel lacks: OpenSSL clients are judged on the socket path");
  }
  const tlsProbes = config["tls-probes"] && tlsTracepoint
    ? new TlsProbes({
        ...uprobeContext,
        onVerdict: (record) => probeRecords.push(record),
        // In the records' queue, in the order recorded: applied between the same records live and in replay.
        onAttached: (pid, attached, atNs) => {
          probeRecords.push({ type: "tls_attached", pid, attached, since: atNs });
          recorder?.tlsAttached(pid, attached, attached ? atNs : undefined);
        },
        ...(recorder ? { onLine: (line: string) => recorder.tlsProbeLine(line) } : {}),
      })
    : null;

  // --- wiring: who tells whom ------------------------------------------------------
  const admission = new ExecAdmission({
    targets,
    removeFromKernel: async (pid) => {
      await probe.removeTarget(pid);
      await goProbes?.unfollow(pid);
      await tlsProbes?.unfollow(pid);
    },
    procRoot: config["proc-root"],
    metrics,
    log,
  });
  probe.onRecord((record) => {
    if (!admission.admit(record)) return false;
    if (tlsProbes && (record.type === "close" || record.type === "ambiguous" || record.type === "send")) tlsProbes.lookNow(record.pid);
    probeRecords.push(record); // a drop here is counted by the queue; the line is still recorded
    return true;
  });
  new TargetSync({ targets, kernel: probe, admission, syscallCounterKeys: (pid) => graph.syscallCounterKeys(pid), forgetBaselines: (pid) => graph.forgetCounters(pid), metrics, log });
  endpoints.onChange((key, present) => probe.setEndpoint(key, present));
  graph.onRequestLevel((pid, on) => void probe.setRequestLevel(pid, on));
  if (recorder) graph.onGoAttached((pid, attached, atNs) => recorder.goAttached(pid, attached, attached ? atNs : undefined));
  if (goProbes) targets.onChange((changes) => goProbes.onTargets(changes));
  if (tlsProbes) targets.onChange((changes) => tlsProbes.onTargets(changes));
  http.readyWhen(() =>
    !probe.ready
      ? { ok: false, reason: "probe not attached" }
      : !probe.controlHealthy
        ? { ok: false, reason: "probe did not acknowledge a target or endpoint change" }
        : { ok: true, reason: "probe attached" },
  );

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
    ...(goProbes || tlsProbes ? [stage("follow channel", () => follow.open(), () => follow.close())] : []),
    stage("target scan", () => targets.scan()),
    probe,
    ...(goProbes ? [goProbes] : []),
    ...(tlsProbes ? [tlsProbes] : []),
    stage("target rescan", () => targets.start(config["rescan-interval"]), () => targets.stop()),
  ];
  const close = await startStages(stages, log);
  log.info("agent ready", { listen: http.address, otlp: otlp.address, otlpGrpc: otlp.grpcAddress, targets: targets.pids().length, apiservers: endpoints.current().map((e) => e.text) });
  return { metrics, variant, listen: http.address, otlp: otlp.address, otlpGrpc: otlp.grpcAddress, onLoss: (listener) => listeners.add(listener), close };
}
