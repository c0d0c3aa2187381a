// Keeps the set of target processes current: decides each exec the probe
// reports (the probe traces a new program from its first instruction, and
// asks), rescans /proc on an interval as the safety net, tells the probe
// about every added and removed pid, and remembers each
// target's identity (comm, Kubernetes metadata, PID-namespace pids) for the
// stages that label and correlate. Removed targets are remembered a little
// longer, bounded, because their last events may still be in flight.
import { BoundedMap } from "../../boundedMap.ts";
import { readFileSync } from "node:fs";
import path from "node:path";
import type { ProcessIdentity } from "../../model.ts";
import type { AgentMetrics } from "../../telemetry/metrics.ts";
import { parseNsPids, readNsPids } from "./pidNamespace.ts";
import { cmdlineText, readProcess } from "./processTable.ts";
import { diffTargets, ruleFor, scanTargets, type Target, type TargetRules } from "./targetRules.ts";

export interface WatchedTarget extends Target {
  identity: Omit<ProcessIdentity, "tid">;
  /** NSpid from /proc/<pid>/status, outermost first. */
  nsPids: number[] | null;
  /** Wall-clock ms when it became a target. */
  sinceMs: number;
  /** It became a target at its exec (not found running by a scan): it is starting. */
  atExec?: true;
}

export interface TargetChanges {
  added: WatchedTarget[];
  removed: WatchedTarget[];
}

interface TargetWatcherOptions {
  rules: TargetRules;
  procRoot: string;
  metrics: AgentMetrics;
  /** Targets found by another source (Kubernetes), with their identity; merged into every scan. */
  external?: () => { pid: number; identity: ProcessIdentity }[];
  /** The other source's verdict on a process that just exec'd: its identity, or null. */
  externalExec?: (pid: number, comm: string) => ProcessIdentity | null;
  onError: (err: unknown) => void;
  /** Removed targets remembered for late events. */
  recentCapacity?: number;
}

export class TargetWatcher {
  private current = new Map<number, WatchedTarget>();
  /** Removed targets, for late events; past recentCapacity the oldest is forgotten, counted. */
  private readonly recent: BoundedMap<number, WatchedTarget>;
  private timer: NodeJS.Timeout | undefined;
  private scanning: Promise<void> | null = null;
  private readonly opts: TargetWatcherOptions;
  /**
   * pid → when its exec made it a target; a scan that began before that may
   * not know it yet. Bounded by the targets themselves (entries go when a scan
   * settles them), and past 4096 the oldest is forgotten, counted.
   */
  private readonly admitted: BoundedMap<number, number>;
  private scanStartedAt = 0;
  private readonly changeListeners: ((changes: TargetChanges) => Promise<void>)[] = [];

  constructor(opts: TargetWatcherOptions) {
    this.opts = opts;
    const dropped = (): void => opts.metrics.eventsDropped.inc({ stage: "targets", reason: "capacity" });
    this.recent = new BoundedMap(opts.recentCapacity ?? 1024, dropped);
    this.admitted = new BoundedMap(4096, dropped);
  }

  /** Who applies changes (the kernel's target set and the series, the Go probes); subscribed before the first scan, told in order. */
  onChange(listener: (changes: TargetChanges) => Promise<void>): void {
    this.changeListeners.push(listener);
  }

  private async changed(changes: TargetChanges): Promise<void> {
    for (const listener of this.changeListeners) await listener(changes);
  }

  pids(): number[] {
    return [...this.current.keys()];
  }

  identity(pid: number): WatchedTarget | undefined {
    return this.current.get(pid) ?? this.recent.get(pid);
  }

  /** The target with this pid now; removed ones are not. */
  target(pid: number): WatchedTarget | undefined {
    return this.current.get(pid);
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

  /**
   * A process exec'd (the probe reports every exec while rules can match a
   * new program, and traces it meanwhile). Decided synchronously, so the
   * probe's following lines from it are judged with its identity. True when
   * it is a target now; false tells the caller to stop tracing it.
   */
  admitExec(pid: number, comm: string): boolean {
    const { rules } = this.opts;
    const before = this.current.get(pid);
    let target: WatchedTarget | null = null;
    if (!rules.exclude(pid)) {
      const cmdline = rules.cmdline ? cmdlineText(readSync(this.opts.procRoot, pid, "cmdline")) : "";
      const source = ruleFor(rules, { pid, comm, cmdline });
      const external = source ? null : (this.opts.externalExec?.(pid, comm) ?? null);
      if (source || external) {
        target = {
          pid,
          comm,
          cmdline,
          source: source ?? "kubernetes",
          nsPids: parseNsPids(readSync(this.opts.procRoot, pid, "status")),
          sinceMs: Date.now(),
          atExec: true,
          identity: external ?? { pid, process: comm, namespace: "", pod: "", container: "", controller: "" },
        };
      }
    }
    if (!target && !before) return false;
    const next = new Map(this.current);
    const removed: WatchedTarget[] = [];
    if (before) {
      // It exec'd another program: a new process as far as labels go.
      next.delete(before.pid);
      this.remember(before);
      removed.push(before);
    }
    if (target) {
      next.set(pid, target);
      this.admitted.set(pid, Date.now());
    }
    this.current = next;
    this.countBySource();
    this.changed({ added: target ? [target] : [], removed }).catch((err: unknown) => this.opts.onError(err));
    return target !== null;
  }

  start(intervalMs: number): void {
    this.timer = setInterval(() => this.requestScan(), intervalMs);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private async scanOnce(): Promise<void> {
    this.scanStartedAt = Date.now();
    const found = await scanTargets(this.opts.rules, this.opts.procRoot);
    const external = new Map((this.opts.external?.() ?? []).map((t) => [t.pid, t.identity]));
    for (const [pid, identity] of external) {
      if (!found.has(pid)) found.set(pid, { pid, comm: identity.process, cmdline: "", source: "kubernetes" });
    }
    const previous = new Map([...this.current].map(([pid, t]) => [pid, t as Target]));
    this.keepFreshlyAdmitted(previous, found);
    const diff = diffTargets(previous, found);
    const added: WatchedTarget[] = [];
    for (const target of diff.added) {
      added.push({
        ...target,
        nsPids: await readNsPids(this.opts.procRoot, target.pid),
        sinceMs: Date.now(),
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
    this.countBySource();
    if (added.length || removed.length) await this.changed({ added, removed });
  }

  /**
   * A target admitted at its exec may be missing from a scan that read /proc
   * (or a Kubernetes list) before it existed: it stays while it still runs,
   * until a scan that began after its admission settles it. Its comm is no
   * test of that: programs rename their main thread after exec (Node 24 calls
   * it MainThread), and another exec would have been decided by admitExec.
   */
  private keepFreshlyAdmitted(previous: Map<number, Target>, found: Map<number, Target>): void {
    for (const [pid, at] of this.admitted) {
      const target = previous.get(pid);
      // Settled: gone from the targets, found by this scan, or admitted long before it began.
      if (!target || found.has(pid) || at < this.scanStartedAt - 2000) {
        this.admitted.delete(pid);
        continue;
      }
      if (readProcess(pid, this.opts.procRoot, false)) found.set(pid, target);
    }
  }

  private countBySource(): void {
    // The Kubernetes source sets its own gauge.
    for (const source of ["pid", "comm", "cmdline"] as const) {
      this.opts.metrics.targets.set({ source }, [...this.current.values()].filter((t) => t.source === source).length);
    }
  }

  private remember(target: WatchedTarget): void {
    this.recent.set(target.pid, target);
  }
}

/** A small /proc file read at once ("" when the process is gone). */
function readSync(procRoot: string, pid: number, file: string): string {
  try {
    return readFileSync(path.join(procRoot, String(pid), file), "utf8");
  } catch {
    return "";
  }
}
