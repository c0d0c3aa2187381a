// The agent's data path, built in one place. Read top to bottom:
//
//   targets ──► probe (bpftrace, in-kernel filters) ──► judge ──► correlate ──► sinks
//   OTLP spans ─────────────────────────────────────────────────► correlate
//
// Every stage is built before any starts; start-up is ordered (sinks, then
// intake, then the probe) and teardown always runs, in reverse. Stages talk
// through bounded queues whose drops are counted.
import { existsSync } from "node:fs";
import type http from "node:http";
import path from "node:path";
import { execa } from "execa";
import type { Config } from "./config.ts";
import type { LossEvent } from "./model.ts";
import { MonotonicClock } from "./correlate/monotonicClock.ts";
import { BoundedQueue } from "./boundedQueue.ts";
import { attachEventFeed, type EventFeed } from "./sinks/feed.ts";
import { startHttpServer } from "./sinks/httpServer.ts";
import { createEventLog, type Logger } from "./sinks/log.ts";
import { initWorkloadSeries, removePodSeries, workloadLabels } from "./sinks/lossMetrics.ts";
import { AgentMetrics } from "./sinks/metrics.ts";
import { createTraceSink } from "./sinks/traces.ts";
import { BpftraceSupervisor } from "./sources/probe/bpftraceSupervisor.ts";
import { endpointKey, parseEndpoint, type EndpointKey } from "./sources/probe/endpointKey.ts";
import { KubernetesTargets } from "./sources/targets/kubernetes/kubernetesTargets.ts";
import type { ProbeRecord } from "./sources/probe/probeOutput.ts";
import { chooseVariant, type ProbeVariant } from "./sources/probe/probeProgram.ts";
import type { IndexedSpan } from "./sources/spans/indexedSpans.ts";
import { startOtlpReceiver, type OtlpReceiver } from "./sources/spans/otlpReceiver.ts";
import { readAgentIdentity } from "./sources/targets/agentIdentity.ts";
import { RecentPids } from "./sources/targets/recentPids.ts";
import { newProgramsCanMatch } from "./sources/targets/targetRules.ts";
import { TargetWatcher } from "./sources/targets/targetWatcher.ts";
import { openRecordWriter } from "./sources/record/writer.ts";
import { AGENT_VERSION } from "./version.ts";
import { buildLossStages } from "./lossStages.ts";

export interface RunningAgent {
  metrics: AgentMetrics;
  variant: ProbeVariant;
  /** Where /metrics, /healthz, /readyz and /events answer. */
  listen: { host: string; port: number };
  otlp: { host: string; port: number };
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

function hostPort(value: string): { host: string; port: number } {
  const i = value.lastIndexOf(":");
  return { host: value.slice(0, i).replace(/^\[|\]$/g, ""), port: Number(value.slice(i + 1)) };
}

export interface StartOptions {
  /** Where loss events go as JSON lines; null for none (the demo draws its own screen). Default stdout. */
  eventLog?: NodeJS.WritableStream | null;
}

export async function startAgent(config: Config, log: Logger, options: StartOptions = {}): Promise<RunningAgent> {
  const metrics = new AgentMetrics();
  const variant = config["probe-variant"] === "auto" ? chooseVariant() : config["probe-variant"];
  const bpftraceVersion = await readBpftraceVersion(config.bpftrace);
  metrics.probeInfo.set({ variant, bpftrace_version: bpftraceVersion }, 1);
  log.info("probe variant chosen", { variant, bpftrace: bpftraceVersion });

  // --- build every stage -------------------------------------------------
  const clock = new MonotonicClock();
  const lossListeners: ((event: LossEvent) => void)[] = [];
  // --record: what the agent received (raw probe lines, span bodies, clock), for replay.
  const recorder = config.record
    ? await openRecordWriter(config.record, {
        header: {
          node: config["node-name"],
          clockOffsetNs: clock.offsetNs,
          recordedAt: new Date().toISOString(),
          agent: { version: AGENT_VERSION, config: { ...config } },
        },
        metrics,
        logger: log,
      })
    : null;
  const eventLogStream = options.eventLog === undefined ? process.stdout : options.eventLog;
  const eventLog = eventLogStream ? createEventLog(eventLogStream, { metrics }) : null;
  // Trace export follows the standard OTEL_* variables: on when an endpoint or
  // an exporter is named, off when OTEL_TRACES_EXPORTER=none.
  const env = process.env;
  const tracesWanted =
    env.OTEL_TRACES_EXPORTER !== "none" &&
    Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_TRACES_EXPORTER);
  const traceSink = createTraceSink({ enabled: tracesWanted, logger: log, metrics });
  let feed: EventFeed | undefined;

  const kube = config.kubernetes
    ? new KubernetesTargets({
        nodeName: config["node-name"],
        watchLabelSelector: config["watch-label-selector"],
        ...(config.kubeconfig ? { kubeconfig: config.kubeconfig } : {}),
        procRoot: config["proc-root"],
        rescanIntervalMs: config["rescan-interval"],
        metrics,
        log,
      })
    : null;

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
    onChange: async ({ added, removed }) => {
      for (const t of added) {
        // A process rejected at its exec may become a target later (moved into
        // a watched container's cgroup): its lines count from now on.
        notTargets.delete(t.pid);
        // Series exist from the first scrape, so rate() sees the first increment.
        initWorkloadSeries(metrics, workloadLabels(t.identity));
        await probe.addTarget(t.pid);
      }
      // A pid in both lists exec'd another program and is still a target: the
      // kernel must keep it (its old identity goes, its counters stay).
      const gone = removed.filter((t) => !added.some((a) => a.pid === t.pid));
      for (const t of gone) await probe.removeTarget(t.pid);
      // The next counter print carries their final values; then the kernel forgets them.
      if (gone.length) {
        setTimeout(() => {
          for (const t of gone) {
            probe.forgetCounters(t.pid).then(
              () => counters.forget(t.pid),
              (err: unknown) => log.warnRateLimited("forget-counters", "probe did not forget a removed target's counters", { error: String(err) }),
            );
          }
        }, 2500).unref();
      }
      // A pod none of whose processes is watched any more: drop its series.
      for (const t of removed) {
        const { namespace, pod } = t.identity;
        if (pod && !targets.pids().some((pid) => targets.identity(pid)?.identity.pod === pod && targets.identity(pid)?.identity.namespace === namespace)) {
          await removePodSeries(metrics, namespace, pod);
        }
      }
      if (added.length || removed.length) {
        log.info("targets changed", { added: added.map((t) => `${t.comm}[${t.pid}]`), removed: removed.map((t) => `${t.comm}[${t.pid}]`) });
      }
    },
  });
  // Apiserver endpoints: the configured ones plus, in Kubernetes, the ones
  // discovered (Service ClusterIP and EndpointSlice addresses), followed live.
  const configured = config.apiserver.map(parseEndpoint);
  let endpoints: EndpointKey[] = configured;
  const followEndpoints = async (discovered: { host: string; port: number }[]): Promise<void> => {
    const next = new Map(configured.map((e) => [e.text, e]));
    for (const { host, port } of discovered) {
      try {
        const key = endpointKey(host, port);
        next.set(key.text, key);
      } catch (err) {
        // The kernel sees addresses, not names: a hostname endpoint cannot be filtered on.
        log.warnRateLimited(`endpoint:${host}`, "apiserver endpoint is not an IP address; ignored", { host, port, error: String(err) });
      }
    }
    const before = new Map(endpoints.map((e) => [e.text, e]));
    endpoints = [...next.values()];
    for (const [text, key] of next) if (!before.has(text)) await probe.setEndpoint(key, true);
    for (const [text, key] of before) if (!next.has(text)) await probe.setEndpoint(key, false);
    log.info("apiserver endpoints", { endpoints: endpoints.map((e) => e.text) });
  };

  // The correlator observes detection latency; the sinks only fan out.
  const stages = buildLossStages({
    config,
    metrics,
    clock,
    identity: (pid) => targets.identity(pid),
    emit: (event) => {
      eventLog?.write(event);
      feed?.publish(event);
      traceSink.export(event);
      for (const listener of lossListeners) listener(event);
    },
  });
  const { correlator, counters } = stages;

  // probe → judge/correlate; bpftrace output is read as fast as it comes, the
  // queue absorbs bursts without blocking the reader.
  const probeToCorrelator = new BoundedQueue<ProbeRecord>({
    name: "probeToCorrelator",
    capacity: 65536,
    metrics,
    consume: stages.handleRecord,
  });
  const spansToCorrelator = new BoundedQueue<IndexedSpan[]>({
    name: "spansToCorrelator",
    capacity: 1024,
    metrics,
    consume: (spans) => correlator.addSpans(spans),
  });

  // With rules that can match a program started later, the probe traces every
  // exec at once and asks; a process that is not a target is dropped again.
  const execWatch = newProgramsCanMatch(config);
  const notTargets = new RecentPids(4096);
  const admit = (record: ProbeRecord): boolean => {
    if (record.type === "exec") {
      if (targets.admitExec(record.pid, record.comm)) {
        notTargets.delete(record.pid);
      } else {
        notTargets.add(record.pid);
        // Removed from the kernel a little later, not at once: a shell or a
        // runtime's init often execs the real program a moment later (after
        // moving itself into the container's cgroup), and a removal landing
        // after that exec would leave the program untraced. What the process
        // sends meanwhile is dropped here. Most such processes have exited by
        // then, which removed them in the kernel: no control message for them.
        setTimeout(() => {
          if (!notTargets.has(record.pid) || !existsSync(path.join(config["proc-root"], String(record.pid)))) return;
          probe.removeTarget(record.pid).catch((err: unknown) =>
            log.warnRateLimited("exec-decision", "probe did not drop a process that is not a target", { error: String(err) }),
          );
        }, 250).unref();
      }
      return true;
    }
    if (record.type === "counters") {
      record.entries = record.entries.filter(({ key }) => !notTargets.has(key[0]!));
      return true;
    }
    if ("pid" in record && notTargets.has(record.pid)) {
      metrics.eventsDropped.inc({ stage: "targets", reason: "not_a_target" });
      return false;
    }
    return true;
  };

  const probe = new BpftraceSupervisor({
    variant,
    bpftrace: config.bpftrace,
    metrics,
    log,
    agentHostPid: self.hostPid,
    state: () => ({ targets: targets.pids(), endpoints, execWatch }),
    onRecord: (record) => {
      if (!admit(record)) return false;
      probeToCorrelator.push(record);
      return true;
    },
    ...(recorder ? { onLine: (line: string) => recorder.probeLine(line) } : {}),
    onInstance: () => counters.reset(),
  });

  // --- start, in order; on failure, tear down what started ---------------
  const teardown: (() => Promise<void> | void)[] = [];
  const close = async (): Promise<void> => {
    for (const step of teardown.reverse().splice(0)) {
      try {
        await step();
      } catch (err) {
        log.warn("teardown step failed", { error: String(err) });
      }
    }
  };
  try {
    if (recorder) teardown.push(() => recorder.close());
    // Kernel time → wall time drifts (NTP slews the wall clock): re-measure.
    const clockTimer = setInterval(() => {
      clock.refresh();
      recorder?.clock(clock.offsetNs);
    }, 60_000);
    clockTimer.unref();
    teardown.push(() => clearInterval(clockTimer));
    const listen = hostPort(config.listen);
    const server: http.Server = await startHttpServer({
      ...listen,
      metrics,
      ready: () =>
        !probe.ready
          ? { ok: false, reason: "probe not attached" }
          : !probe.controlHealthy
            ? { ok: false, reason: "probe did not acknowledge a target or endpoint change" }
            : { ok: true, reason: "probe attached" },
    });
    teardown.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    feed = attachEventFeed(server, { replayCapacity: 1000, maxBufferedBytes: 1 << 20, metrics });
    teardown.push(() => feed!.close());
    teardown.push(() => traceSink.shutdown());
    const stopTicking = correlator.startTicking(250);
    teardown.push(() => {
      stopTicking();
      correlator.flush();
    });
    const otlp: OtlpReceiver = await startOtlpReceiver({
      listen: config["otlp-listen"],
      maxBodyBytes: 8 << 20,
      ...(config["otlp-forward"] ? { forwardUrl: config["otlp-forward"] } : {}),
      metrics,
      onSpans: (spans) => spansToCorrelator.push(spans),
      ...(recorder ? { onAccepted: ({ body, contentType, peer }) => recorder.spans(peer, contentType, body) } : {}),
    });
    teardown.push(() => otlp.close());

    if (kube) {
      await kube.start();
      teardown.push(() => kube.stop());
      await followEndpoints(kube.apiservers());
      kube.onApiservers((discovered) => {
        followEndpoints(discovered).catch((err: unknown) =>
          log.warnRateLimited("endpoints", "apiserver endpoint change not applied", { error: String(err) }),
        );
      });
      kube.onTargets(() => targets.requestScan());
    }
    await targets.scan();
    teardown.push(() => targets.stop());
    teardown.push(() => probe.stop());
    await probe.start();
    targets.start(config["rescan-interval"]);
    const address = server.address();
    const bound = typeof address === "object" && address ? { host: address.address, port: address.port } : listen;
    log.info("agent ready", { listen: bound, otlp: otlp.address, targets: targets.pids().length, apiservers: endpoints.map((e) => e.text) });
    return {
      metrics,
      variant,
      listen: bound,
      otlp: otlp.address,
      onLoss: (listener) => lossListeners.push(listener),
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
