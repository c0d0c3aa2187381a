// Request-level probing of the Go targets: every target's executable is
// inspected once per binary (device and inode); each binary whose HTTP/2
// client can be hooked gets its own bpftrace program (uprobes are per inode),
// filtered to the targets running it, and re-rendered when that set changes.
// Everything else stays on the socket path alone, with the reason logged once
// per binary. Lines go to GoRequests; the drain timer applies them in order.
import { stat } from "node:fs/promises";
import path from "node:path";
import { startAdaptiveTicker, type AdaptiveTicker } from "../../adaptiveTicker.ts";
import type { Logger } from "../../sinks/log.ts";
import type { AgentMetrics } from "../../sinks/metrics.ts";
import { inspectGoBinary, type GoBinaryInspected } from "../goBinary/inspectGoBinary.ts";
import { BpftraceSupervisor } from "../probe/bpftraceSupervisor.ts";
import type { TargetChanges } from "../targets/targetWatcher.ts";
import { GO_PROBE_ENV, MAX_PIDS_PER_PROGRAM, renderGoProgram } from "./goProbeProgram.ts";
import { isGoRecord, type GoRequests } from "./goRequests.ts";

export interface GoProbesOptions {
  requests: GoRequests;
  bpftrace: string;
  procRoot: string;
  agentHostPid: number;
  metrics: AgentMetrics;
  log: Logger;
  /** Kernel time now (CLOCK_MONOTONIC ns, as bpftrace's nsecs). */
  nowNs: () => bigint;
  /** How often the request lines are applied (default 25 ms). */
  drainIntervalMs?: number;
  /** Binaries remembered, probed or not (default 1024). */
  binaryCapacity?: number;
  /** Every line a Go program printed, raw (--record). */
  onLine?: (line: string) => void;
}

interface Binary {
  /** The inspection; a string says why it cannot be probed. */
  inspected: GoBinaryInspected | string;
  pids: Set<number>;
  program: BpftraceSupervisor | null;
  /** The pid set the running program was rendered with. */
  renderedFor: string;
  /** The running program attached once and is counted in lostwrite_go_probes_attached. */
  counted: boolean;
}

export class GoProbes {
  readonly name = "go probes";
  readonly #o: Required<GoProbesOptions>;
  /** dev:inode → binary. */
  readonly #binaries = new Map<string, Binary>();
  readonly #binaryOf = new Map<number, string>();
  #ticker: AdaptiveTicker | null = null;
  /** Changes are applied one at a time, in order: a program restart takes a while. */
  #work: Promise<void> = Promise.resolve();
  #stopped = false;

  constructor(opts: GoProbesOptions) {
    this.#o = { drainIntervalMs: 25, binaryCapacity: 1024, onLine: () => {}, ...opts };
  }

  /** Drains every drainIntervalMs while lines wait; once a second when none does, woken by the next. */
  start(): void {
    const requests = this.#o.requests;
    const ticker = startAdaptiveTicker(
      () => {
        requests.drain(this.#o.nowNs());
        this.#o.metrics.queueLength.set({ queue: "goRequests" }, requests.size.queued);
      },
      () => requests.busy,
      this.#o.drainIntervalMs,
      1000,
    );
    requests.onQueued(() => ticker.wake());
    this.#ticker = ticker;
  }

  /** A target change; returns at once, the programs follow in the background. */
  onTargets(changes: TargetChanges): Promise<void> {
    this.#work = this.#work.then(() => this.#apply(changes)).catch((error: unknown) => {
      this.#o.log.warnRateLimited("go-probes", "Go probe update failed", { error: String(error) });
    });
    return Promise.resolve();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#ticker?.stop();
    await this.#work;
    for (const binary of this.#binaries.values()) await binary.program?.stop();
    this.#o.requests.flush();
  }

  async #apply({ added, removed }: TargetChanges): Promise<void> {
    if (this.#stopped) return;
    const touched = new Set<string>();
    for (const { pid } of removed) {
      const key = this.#binaryOf.get(pid);
      if (key === undefined) continue;
      this.#binaryOf.delete(pid);
      this.#binaries.get(key)?.pids.delete(pid);
      this.#o.requests.forget(pid, this.#o.nowNs());
      touched.add(key);
    }
    for (const { pid } of added) {
      const key = await this.#binaryKey(pid);
      if (key === null) continue;
      const binary = this.#binaries.get(key) ?? (await this.#inspect(key, pid));
      if (typeof binary.inspected === "string") continue;
      binary.pids.add(pid);
      this.#binaryOf.set(pid, key);
      touched.add(key);
    }
    for (const key of touched) await this.#rerender(key);
    this.#o.metrics.goTargets.set({ coverage: "requests" }, this.#binaryOf.size);
  }

  async #binaryKey(pid: number): Promise<string | null> {
    try {
      const info = await stat(this.#exe(pid));
      return `${info.dev}:${info.ino}`;
    } catch (error) {
      // Gone already, or /proc/<pid>/exe unreadable (without CAP_SYS_PTRACE in a pod).
      this.#o.log.warnRateLimited("go-probes-exe", "cannot read a target's executable; it stays on the socket path", { pid, error: String(error) });
      return null;
    }
  }

  async #inspect(key: string, pid: number): Promise<Binary> {
    const report = await inspectGoBinary(this.#exe(pid));
    const binary: Binary = { inspected: report.ok ? report : report.reason, pids: new Set(), program: null, renderedFor: "", counted: false };
    if (report.ok) {
      this.#o.log.info("Go HTTP/2 client found: requests are followed", {
        pid, go: report.goVersion, families: report.families.map((f) => f.name), uprobesAt: report.probePlacement,
      });
    } else {
      this.#o.log.info("target binary cannot be followed per request; socket path only", { pid, reason: report.reason });
    }
    this.#binaries.set(key, binary);
    if (this.#binaries.size > this.#o.binaryCapacity) {
      // Forget the oldest binary that no target runs any more.
      for (const [oldKey, old] of this.#binaries) {
        if (old.pids.size === 0 && old.program === null) {
          this.#binaries.delete(oldKey);
          this.#o.metrics.eventsDropped.inc({ stage: "go_probes", reason: "capacity" });
          break;
        }
      }
    }
    return binary;
  }

  /** Starts, restarts or stops the program of one binary for its current pids. */
  async #rerender(key: string): Promise<void> {
    const binary = this.#binaries.get(key);
    if (binary === undefined || typeof binary.inspected === "string") return;
    const pids = [...binary.pids].sort((a, b) => a - b).slice(0, MAX_PIDS_PER_PROGRAM);
    const renderedFor = pids.join(",");
    if (renderedFor === binary.renderedFor) return;
    if (binary.program !== null) {
      const old = binary.program;
      binary.program = null;
      if (binary.counted) this.#o.metrics.goProbesAttached.dec();
      binary.counted = false;
      await old.stop();
      this.#o.log.info("Go probe detached", { pids: binary.renderedFor.split(",").map(Number) });
    }
    binary.renderedFor = renderedFor;
    if (pids.length === 0 || this.#stopped) return;
    if (binary.pids.size > pids.length) {
      this.#o.log.warnRateLimited("go-probes-pids", "more targets run one Go binary than one program follows; the rest stay on the socket path", {
        binary: binary.inspected.path, followed: pids.length, targets: binary.pids.size,
      });
    }
    const inspected = binary.inspected;
    const program = new BpftraceSupervisor({
      variant: "sockets",
      bpftrace: this.#o.bpftrace,
      metrics: this.#o.metrics,
      log: this.#o.log,
      agentHostPid: this.#o.agentHostPid,
      state: () => ({ targets: [], endpoints: [], execWatch: false }),
      onInstance: () => {},
      readyTimeoutMs: 30_000,
      onLine: this.#o.onLine,
      program: {
        // Through a live pid's /proc entry: the path works in a pod, and for a binary deleted since.
        render: () => renderGoProgram({ binary: this.#exe(pids.find((pid) => binary.pids.has(pid)) ?? pids[0]!), families: inspected.families, pids }),
        flags: ["--unsafe"],
        env: GO_PROBE_ENV,
        up: (attached) => {
          const atNs = this.#o.nowNs();
          for (const pid of pids) this.#o.requests.setAttached(pid, attached && binary.pids.has(pid), atNs);
        },
        restarted: (reason) => this.#o.metrics.goProbeRestarts.inc({ reason }),
      },
    });
    program.name = `go probe ${path.basename(inspected.path)}`;
    program.onRecord((record) => {
      if (isGoRecord(record)) this.#o.requests.add(record);
      return true;
    });
    binary.program = program;
    // Not awaited: a program that cannot attach (its bpftrace crash-loops,
    // its pid is gone) must not hold up the changes behind it.
    program.start().then(
      () => {
        if (binary.program !== program) return;
        binary.counted = true;
        this.#o.metrics.goProbesAttached.inc();
        this.#o.log.info("Go probe attached", { go: inspected.goVersion, families: inspected.families.map((f) => f.name), pids });
      },
      (error: unknown) => {
        if (binary.program !== program) return;
        this.#o.log.warn("Go probe did not attach; these targets stay on the socket path", { pids, error: String(error) });
      },
    );
  }

  #exe(pid: number): string {
    return path.join(this.#o.procRoot, String(pid), "exe");
  }
}
