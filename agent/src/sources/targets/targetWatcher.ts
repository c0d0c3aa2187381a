// Keeps the set of target processes current: rescans /proc on an interval,
// tells the probe about every added and removed pid, and remembers each
// target's identity (comm, Kubernetes metadata, PID-namespace pids) for the
// stages that label and correlate. Removed targets are remembered a little
// longer, bounded, because their last events may still be in flight.
import type { ProcessIdentity } from "../../model.ts";
import type { AgentMetrics } from "../../sinks/metrics.ts";
import { readNsPids } from "./pidNamespace.ts";
import { diffTargets, scanTargets, type Target, type TargetRules } from "./targetRules.ts";

export interface WatchedTarget extends Target {
  identity: Omit<ProcessIdentity, "tid">;
  /** NSpid from /proc/<pid>/status, outermost first. */
  nsPids: number[] | null;
}

export interface TargetChanges {
  added: WatchedTarget[];
  removed: WatchedTarget[];
}

export interface TargetWatcherOptions {
  rules: TargetRules;
  procRoot: string;
  metrics: AgentMetrics;
  onChange: (changes: TargetChanges) => Promise<void>;
  /** Targets found by another source (Kubernetes), with their identity; merged into every scan. */
  external?: () => { pid: number; identity: ProcessIdentity }[];
  onError: (err: unknown) => void;
  /** Removed targets remembered for late events. */
  recentCapacity?: number;
}

export class TargetWatcher {
  private current = new Map<number, WatchedTarget>();
  private readonly recent = new Map<number, WatchedTarget>();
  private timer: NodeJS.Timeout | undefined;
  private scanning: Promise<void> | null = null;
  private readonly opts: TargetWatcherOptions;

  constructor(opts: TargetWatcherOptions) {
    this.opts = opts;
  }

  pids(): number[] {
    return [...this.current.keys()];
  }

  identity(pid: number): WatchedTarget | undefined {
    return this.current.get(pid) ?? this.recent.get(pid);
  }

  async scan(): Promise<void> {
    // One scan at a time: a slow /proc never stacks scans up.
    this.scanning ??= this.scanOnce().finally(() => (this.scanning = null));
    await this.scanning;
  }

  /**
   * A scan in the background (on the interval, or when Kubernetes says the
   * pods changed): a failure (an unreadable /proc, a probe that did not take a
   * change) is reported and the next scan tries again; it never stops the agent.
   */
  requestScan(): void {
    this.scan().catch((err: unknown) => this.opts.onError(err));
  }

  start(intervalMs: number): void {
    this.timer = setInterval(() => this.requestScan(), intervalMs);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private async scanOnce(): Promise<void> {
    const found = await scanTargets(this.opts.rules, this.opts.procRoot);
    const external = new Map((this.opts.external?.() ?? []).map((t) => [t.pid, t.identity]));
    for (const [pid, identity] of external) {
      if (!found.has(pid)) found.set(pid, { pid, comm: identity.process, cmdline: "", source: "kubernetes" });
    }
    const previous = new Map([...this.current].map(([pid, t]) => [pid, t as Target]));
    const diff = diffTargets(previous, found);
    const added: WatchedTarget[] = [];
    for (const target of diff.added) {
      added.push({
        ...target,
        nsPids: await readNsPids(this.opts.procRoot, target.pid),
        identity: external.get(target.pid) ?? {
          pid: target.pid,
          process: target.comm,
          namespace: "",
          pod: "",
          container: "",
          controller: "",
        },
      });
    }
    const removed = diff.removed.map((t) => this.current.get(t.pid)!);
    const next = new Map(this.current);
    for (const t of removed) {
      next.delete(t.pid);
      this.remember(t);
    }
    for (const t of added) next.set(t.pid, t);
    this.current = next;
    // The Kubernetes source sets its own gauge.
    for (const source of ["pid", "comm", "cmdline"] as const) {
      this.opts.metrics.targets.set({ source }, [...next.values()].filter((t) => t.source === source).length);
    }
    if (added.length || removed.length) await this.opts.onChange({ added, removed });
  }

  private remember(target: WatchedTarget): void {
    const capacity = this.opts.recentCapacity ?? 1024;
    this.recent.delete(target.pid);
    this.recent.set(target.pid, target);
    while (this.recent.size > capacity) this.recent.delete(this.recent.keys().next().value!);
  }
}
