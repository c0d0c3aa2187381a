// The live agent's parts as stages (see stage.ts): each knows how to start
// and stop one thing, and nothing about the others beyond what it is given.
// pipeline.ts lists them in start order. Also the few builders it calls for
// a part that takes more than a line to make (probe variant, targets, event
// log, readiness), so that it reads as its diagram.
import type http from "node:http";
import { execa } from "execa";
import type { Config } from "./config.ts";
import type { MonotonicClock } from "./correlate/monotonicClock.ts";
import type { HostPort } from "./hostPort.ts";
import type { LossEvent } from "./model.ts";
import type { LossSink, Stage } from "./stage.ts";
import { createEventLog } from "./sinks/eventLog.ts";
import { attachEventFeed, type EventFeed } from "./sinks/feed.ts";
import { renderRunbooksPage } from "./sinks/runbooksPage.ts";
import { startHttpServer } from "./sinks/httpServer.ts";
import type { Logger } from "./telemetry/log.ts";
import type { AgentMetrics } from "./telemetry/metrics.ts";
import { createTraceSink, DISABLED_TRACE_SINK, type TraceSink } from "./sinks/traces.ts";
import type { BpftraceSupervisor } from "./sources/probe/bpftraceSupervisor.ts";
import type { EndpointSync } from "./sources/probe/endpointSync.ts";
import { chooseVariant, kernelBtf, type ProbeVariant } from "./sources/probe/probeProgram.ts";
import { startOtlpGrpcReceiver } from "./sources/spans/otlpGrpcReceiver.ts";
import { startOtlpReceiver, type OtlpReceiver } from "./sources/spans/otlpReceiver.ts";
import { parseForwarder, type ForwarderSelector } from "./sources/spans/forwarders.ts";
import { SenderIdentity, type TargetView } from "./sources/spans/senderIdentity.ts";
import type { ConnectionSender, KnownProcess, SenderDirectory } from "./sources/spans/senderTrust.ts";
import { canonicalAddress } from "./ipAddress.ts";
import { SpanIntake, type SpanIntakeOptions } from "./sources/spans/spanIntake.ts";
import type { RecordedSender } from "./sources/record/format.ts";
import { openRecordWriter, type RecordWriter } from "./sources/record/writer.ts";
import type { AgentIdentity } from "./sources/targets/agentIdentity.ts";
import type { KubernetesTargets } from "./sources/targets/kubernetes/kubernetesTargets.ts";
import { TargetWatcher, type WatchedTarget } from "./sources/targets/targetWatcher.ts";
import { ANSWER_RULES } from "./vocabulary/answerRules.ts";
import { AGENT_VERSION } from "./version.ts";

type Readiness = () => { ok: boolean; reason: string };

/** /metrics, /healthz, /readyz, /runbooks; the event feed attaches to the same server. */
export class HttpStage implements Stage {
  readonly name = "http server";
  server: http.Server | null = null;
  private ready: Readiness = () => ({ ok: false, reason: "starting" });
  private bound: HostPort;
  private readonly metrics: AgentMetrics;

  constructor(listen: HostPort, metrics: AgentMetrics) {
    this.bound = listen;
    this.metrics = metrics;
  }

  /** What /readyz answers; set while wiring. */
  readyWhen(ready: Readiness): void {
    this.ready = ready;
  }

  /** The address bound (the port chosen when 0 was asked for). */
  get address(): HostPort {
    return this.bound;
  }

  async start(): Promise<void> {
    this.server = await startHttpServer({ ...this.bound, metrics: this.metrics, ready: () => this.ready(), runbooks: renderRunbooksPage() });
    const address = this.server.address();
    if (typeof address === "object" && address) this.bound = { host: address.address, port: address.port };
  }

  stop(): Promise<void> {
    return new Promise((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

/** The /events WebSocket feed. */
export class FeedStage implements Stage, LossSink {
  readonly name = "event feed";
  private feed: EventFeed | null = null;
  private readonly http: HttpStage;
  private readonly metrics: AgentMetrics;

  constructor(http: HttpStage, metrics: AgentMetrics) {
    this.http = http;
    this.metrics = metrics;
  }

  start(): void {
    if (!this.http.server) throw new Error("the http server is not listening");
    this.feed = attachEventFeed(this.http.server, { replayCapacity: 1000, maxBufferedBytes: 1 << 20, metrics: this.metrics });
  }

  publish(event: LossEvent): void {
    this.feed?.publish(event);
  }

  async stop(): Promise<void> {
    await this.feed?.close();
  }
}

/**
 * The agent's own "status write lost" spans. Export follows the standard
 * OTEL_* variables: on when an endpoint or an exporter is named, off when
 * OTEL_TRACES_EXPORTER=none.
 */
export class TraceStage implements Stage, LossSink {
  readonly name = "trace export";
  private readonly wanted: boolean;
  private readonly metrics: AgentMetrics;
  private readonly log: Logger;
  private sink: TraceSink = DISABLED_TRACE_SINK;

  constructor(metrics: AgentMetrics, log: Logger, env: NodeJS.ProcessEnv = process.env) {
    this.metrics = metrics;
    this.log = log;
    this.wanted =
      env.OTEL_TRACES_EXPORTER !== "none" &&
      Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_TRACES_EXPORTER);
  }

  async start(): Promise<void> {
    this.sink = await createTraceSink({ enabled: this.wanted, logger: this.log, metrics: this.metrics });
  }

  publish(event: LossEvent): void {
    this.sink.export(event);
  }

  stop(): Promise<void> {
    return this.sink.shutdown();
  }
}

/** The event log on `out` (one JSON line per loss event), or none when `out` is null. */
export function eventLogSinks(out: NodeJS.WritableStream | null, metrics: AgentMetrics): LossSink[] {
  if (out === null) return [];
  const log = createEventLog(out, { metrics });
  return [{ name: "event log", publish: (event: LossEvent) => log.write(event) }];
}

/** In-process consumers of loss events (the demo, tests). */
export class ListenerSink implements LossSink {
  readonly name = "listeners";
  private readonly listeners: ((event: LossEvent) => void)[] = [];

  add(listener: (event: LossEvent) => void): void {
    this.listeners.push(listener);
  }

  publish(event: LossEvent): void {
    for (const listener of this.listeners) listener(event);
  }
}

/** The largest OTLP request taken, over HTTP or gRPC, as sent and decompressed. */
const OTLP_MAX_BODY_BYTES = 8 << 20;

/** The span intake: OTLP/HTTP and, unless turned off, OTLP/gRPC, judged and forwarded alike. */
export class OtlpStage implements Stage {
  readonly name = "otlp receivers";
  private http: OtlpReceiver | null = null;
  private grpc: OtlpReceiver | null = null;
  private readonly intake: SpanIntake;
  private readonly config: Config;

  /**
   * `senders` is this node's pods by address in Kubernetes mode, else null;
   * each connection's sender process is looked for among `targets`: see
   * sources/spans/senderTrust.ts.
   */
  constructor(
    config: Config,
    metrics: AgentMetrics,
    recorder: RecordWriter | null,
    onSpans: SpanIntakeOptions["onSpans"],
    senders: () => SenderDirectory | null,
    targets: Pick<TargetWatcher, "pids" | "target">,
    log: Pick<Logger, "warnRateLimited">,
  ) {
    this.config = config;
    const identity = new SenderIdentity({
      procRoot: config["proc-root"],
      targets: targetView(targets),
      forwarders: config["otlp-forwarders"].map(forwarderSelector),
      metrics,
      podAt: config.kubernetes ? (address) => senders()?.podAt(canonicalAddress(address) ?? address) ?? null : null,
    });
    this.intake = new SpanIntake({
      metrics,
      onSpans,
      senders,
      identity,
      log,
      ...(config["otlp-forward"] ? { forwardUrl: config["otlp-forward"] } : {}),
      ...(recorder ? { onAccepted: ({ body, contentType, peer, sender }) => recorder.spans(peer, contentType, body, undefined, recordedSender(sender)) } : {}),
    });
  }

  get address(): HostPort {
    if (!this.http) throw new Error("the otlp receiver is not listening");
    return this.http.address;
  }

  /** Where OTLP/gRPC is received; null when turned off. */
  get grpcAddress(): HostPort | null {
    return this.grpc?.address ?? null;
  }

  async start(): Promise<void> {
    this.http = await startOtlpReceiver({ listen: this.config["otlp-listen"], maxBodyBytes: OTLP_MAX_BODY_BYTES, intake: this.intake });
    const grpcListen = this.config["otlp-grpc-listen"];
    if (grpcListen === "off") return;
    try {
      this.grpc = await startOtlpGrpcReceiver({ listen: grpcListen, maxBodyBytes: OTLP_MAX_BODY_BYTES, intake: this.intake });
    } catch (err) {
      await this.http.close();
      throw err;
    }
  }

  async stop(): Promise<void> {
    await Promise.all([this.http?.close(), this.grpc?.close()]);
    await this.intake.close();
  }
}

/** The target source as the span intake asks it: which processes are targets now, and their own pids. */
function targetView(targets: Pick<TargetWatcher, "pids" | "target">): TargetView {
  const known = (t: WatchedTarget): KnownProcess => ({
    hostPid: t.pid,
    nsPid: t.nsPids?.at(-1) ?? t.pid,
    comm: t.identity.process || t.comm,
    namespace: t.identity.namespace || null,
    pod: t.identity.pod || null,
  });
  return {
    target: (pid) => {
      const t = targets.target(pid);
      return t === undefined ? null : known(t);
    },
    all: () => targets.pids().flatMap((pid) => {
      const t = targets.target(pid);
      return t === undefined ? [] : [known(t)];
    }),
  };
}

/** What replay needs of a connection's sender to judge the recorded resources alike. */
function recordedSender(sender: ConnectionSender | null): RecordedSender | undefined {
  if (sender === null) return undefined;
  if (sender.kind !== "target") return { kind: sender.kind };
  const { hostPid, nsPid, comm, namespace, pod } = sender.process;
  return { kind: "target", pid: hostPid, nsPid, comm, namespace, pod };
}

/** A config entry validated at load (config.ts), as a selector. */
function forwarderSelector(text: string): ForwarderSelector {
  const parsed = parseForwarder(text);
  if ("error" in parsed) throw new Error(`otlp-forwarders: "${text}": ${parsed.error}`);
  return parsed;
}

/** Pods and apiserver endpoints from the Kubernetes API, followed live. */
export function kubernetesStage(kube: KubernetesTargets, targets: TargetWatcher, endpoints: EndpointSync, log: Logger): Stage {
  return {
    name: "kubernetes",
    async start() {
      await kube.start();
      try {
        await endpoints.follow(kube.apiservers());
      } catch (err) {
        await kube.stop();
        throw err;
      }
      kube.onApiservers((discovered) => {
        endpoints.follow(discovered).catch((err: unknown) => log.warnRateLimited("endpoints", "apiserver endpoint change not applied", { error: String(err) }));
      });
      kube.onTargets(() => targets.requestScan());
    },
    stop: () => kube.stop(),
  };
}

/** Loaded only with --kubernetes: the client library is the agent's largest dependency. */
export async function kubernetesTargets(config: Config, metrics: AgentMetrics, log: Logger): Promise<KubernetesTargets> {
  const { KubernetesTargets } = await import("./sources/targets/kubernetes/kubernetesTargets.ts");
  return new KubernetesTargets({
    nodeName: config["node-name"],
    watchLabelSelector: config["watch-label-selector"],
    ...(config.kubeconfig ? { kubeconfig: config.kubeconfig } : {}),
    procRoot: config["proc-root"],
    rescanIntervalMs: config["rescan-interval"],
    metrics,
    log,
  });
}

/** The socket probe's variant (configured, or chosen for this kernel), logged and exported with bpftrace's version. */
export async function pickProbeVariant(config: Config, metrics: AgentMetrics, log: Logger): Promise<ProbeVariant> {
  const variant = config["probe-variant"] === "auto" ? chooseVariant() : config["probe-variant"];
  const bpftraceVersion = await readBpftraceVersion(config.bpftrace);
  metrics.probeInfo.set({ variant, bpftrace_version: bpftraceVersion, answer_rule: ANSWER_RULES[variant] }, 1);
  log.info("probe variant chosen", { variant, bpftrace: bpftraceVersion });
  const btf = kernelBtf();
  if (btf.error !== null) log.warn("bpftrace is given the kernel's whole BTF, not the cut of what the programs read", { file: btf.file, error: btf.error });
  else log.info("kernel BTF cut to what the programs read", { file: btf.file, kernelBytes: btf.kernelBytes, cutBytes: btf.cutBytes });
  return variant;
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

/**
 * The targets: by the configured rules, from /proc, and in Kubernetes mode
 * the pods of this node. The agent itself and its parent are never targets.
 * With --record, a target is recorded before the line that made it one
 * (the first of the watcher's listeners), so that replay names it alike.
 */
export function watchTargets(config: Config, kube: KubernetesTargets | null, self: AgentIdentity, recorder: RecordWriter | null, metrics: AgentMetrics, log: Logger): TargetWatcher {
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
  if (recorder) {
    targets.onChange((changes) => {
      for (const { pid } of changes.removed) recorder.target(pid, "", false);
      for (const { pid, identity } of changes.added) recorder.target(pid, identity.process, true);
      return Promise.resolve();
    });
  }
  return targets;
}

/** What /readyz answers: ready once the probe is attached and acknowledges its changes. */
export function probeReadiness(probe: Pick<BpftraceSupervisor, "ready" | "controlHealthy">): Readiness {
  return () =>
    !probe.ready
      ? { ok: false, reason: "probe not attached" }
      : !probe.controlHealthy
        ? { ok: false, reason: "probe did not acknowledge a target or endpoint change" }
        : { ok: true, reason: "probe attached" };
}

/** Kernel time → wall time drifts (NTP slews the wall clock): re-measured every minute, and recorded. */
export function clockStage(clock: MonotonicClock, recorder: RecordWriter | null, intervalMs = 60_000): Stage {
  let timer: NodeJS.Timeout | undefined;
  return {
    name: "clock refresh",
    start: () => {
      timer = setInterval(() => {
        clock.refresh();
        recorder?.clock(clock.offsetNs);
      }, intervalMs);
      timer.unref();
    },
    stop: () => clearInterval(timer),
  };
}

/** --record: what the agent received (raw probe lines, span bodies, clock), for replay. */
export async function openRecorder(config: Config, clock: MonotonicClock, metrics: AgentMetrics, log: Logger): Promise<RecordWriter | null> {
  if (!config.record) return null;
  return openRecordWriter(config.record, {
    header: {
      node: config["node-name"],
      clockOffsetNs: clock.offsetNs,
      recordedAt: new Date().toISOString(),
      agent: { version: AGENT_VERSION, config: { ...config } },
    },
    metrics,
    logger: log,
  });
}
