// Keeps the kernel's target set and the per-workload series in step with the
// target watcher: a target added is traced and gets its series at once; a
// target removed stops being traced, its final counters are read, then the
// kernel forgets them; a pod with no target left loses its series, but only
// after a grace long enough for Prometheus to scrape what its last process
// did: a process that loses a write and exits (a crash, a Job) would
// otherwise take its loss out of /metrics before anyone saw it.
import { BoundedMap } from "../../boundedMap.ts";
import type { Logger } from "../../telemetry/log.ts";
import type { SyscallCounterKey } from "../probe/controlChannel.ts";
import { initWorkloadSeries, removePodSeries, workloadLabels } from "../../telemetry/workloadSeries.ts";
import type { AgentMetrics } from "../../telemetry/metrics.ts";
import type { ExecAdmission } from "./execAdmission.ts";
import type { TargetChanges, TargetWatcher } from "./targetWatcher.ts";

/** What of the probe target changes need. */
interface KernelTargets {
  addTarget(pid: number): Promise<void>;
  removeTarget(pid: number): Promise<void>;
  forgetCounters(pid: number, keyed: readonly SyscallCounterKey[]): Promise<void>;
}

interface TargetSyncOptions {
  targets: TargetWatcher;
  kernel: KernelTargets;
  admission: ExecAdmission;
  /** The pid's entries in the counter maps keyed longer than the pid, as printed so far. */
  syscallCounterKeys: (pid: number) => SyscallCounterKey[];
  /** Forgets a pid's counter baselines once the kernel has. */
  forgetBaselines: (pid: number) => void;
  metrics: AgentMetrics;
  log: Logger;
  /** How long a removed target's counters stay in the kernel: long enough for one more counter print. */
  forgetAfterMs?: number;
  /** How long a pod with no target left keeps its series (default 10 min: several scrapes at any usual interval). */
  podSeriesGraceMs?: number;
  /** Pods waiting to lose their series, at most (default 4096); past it the oldest loses them at once, counted as a targets/capacity drop. */
  podSeriesCapacity?: number;
}

const DEFAULT_POD_SERIES_GRACE_MS = 10 * 60_000;

export class TargetSync {
  private readonly opts: TargetSyncOptions;
  /**
   * "namespace/pod" → the timer that removes its series once the grace is
   * over. Past capacity the oldest pod's series go at once, counted.
   */
  private readonly podSeriesRemovals: BoundedMap<string, NodeJS.Timeout>;

  constructor(opts: TargetSyncOptions) {
    this.opts = opts;
    this.podSeriesRemovals = new BoundedMap(opts.podSeriesCapacity ?? 4096, (oldestKey, oldestTimer) => {
      clearTimeout(oldestTimer);
      const [oldestNamespace = "", oldestPod = ""] = oldestKey.split("/");
      opts.metrics.eventsDropped.inc({ stage: "targets", reason: "capacity" });
      this.removeNow(oldestNamespace, oldestPod);
    });
    opts.targets.onChange((changes) => this.apply(changes));
  }

  async apply({ added, removed }: TargetChanges): Promise<void> {
    const { kernel, metrics, log } = this.opts;
    for (const t of added) {
      // A process rejected at its exec may become a target later (moved into
      // a watched container's cgroup): its lines count from now on.
      this.opts.admission.forget(t.pid);
      // A pod watched again keeps its series.
      this.cancelPodSeriesRemoval(t.identity.namespace, t.identity.pod);
      // Series exist from the first scrape, so rate() sees the first increment.
      initWorkloadSeries(metrics, workloadLabels(t.identity));
      await kernel.addTarget(t.pid);
    }
    // A pid in both lists exec'd another program and is still a target: the
    // kernel must keep it (its old identity goes, its counters stay).
    const gone = removed.filter((t) => !added.some((a) => a.pid === t.pid));
    for (const t of gone) await kernel.removeTarget(t.pid);
    if (gone.length) this.forgetLater(gone.map((t) => t.pid));
    // A pod none of whose processes is watched any more: drop its series, after the grace.
    for (const { identity } of removed) {
      if (identity.pod && !this.podWatched(identity.namespace, identity.pod)) this.removePodSeriesLater(identity.namespace, identity.pod);
    }
    if (added.length || removed.length) {
      log.info("targets changed", { added: added.map((t) => `${t.comm}[${t.pid}]`), removed: removed.map((t) => `${t.comm}[${t.pid}]`) });
    }
  }

  private podWatched(namespace: string, pod: string): boolean {
    return this.opts.targets.pids().some((pid) => {
      const other = this.opts.targets.identity(pid)?.identity;
      return other?.pod === pod && other.namespace === namespace;
    });
  }

  private removePodSeriesLater(namespace: string, pod: string): void {
    const key = `${namespace}/${pod}`;
    this.cancelPodSeriesRemoval(namespace, pod);
    const timer = setTimeout(() => {
      this.podSeriesRemovals.delete(key);
      if (!this.podWatched(namespace, pod)) this.removeNow(namespace, pod);
    }, this.opts.podSeriesGraceMs ?? DEFAULT_POD_SERIES_GRACE_MS);
    // Never what keeps the agent running.
    timer.unref();
    this.podSeriesRemovals.set(key, timer);
  }

  private cancelPodSeriesRemoval(namespace: string, pod: string): void {
    const key = `${namespace}/${pod}`;
    clearTimeout(this.podSeriesRemovals.get(key));
    this.podSeriesRemovals.delete(key);
  }

  private removeNow(namespace: string, pod: string): void {
    removePodSeries(this.opts.metrics, namespace, pod).catch((err: unknown) =>
      this.opts.log.warnRateLimited("pod-series", "could not remove a gone pod's series", { error: String(err) }),
    );
  }

  /** The next counter print carries the removed targets' final values; then the kernel forgets them. */
  private forgetLater(pids: number[]): void {
    const { kernel, log } = this.opts;
    setTimeout(() => {
      for (const pid of pids) {
        kernel.forgetCounters(pid, this.opts.syscallCounterKeys(pid)).then(
          () => this.opts.forgetBaselines(pid),
          (err: unknown) => log.warnRateLimited("forget-counters", "probe did not forget a removed target's counters", { error: String(err) }),
        );
      }
    }, this.opts.forgetAfterMs ?? 2500).unref();
  }
}
