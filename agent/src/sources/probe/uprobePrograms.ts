// One bpftrace program per probed file — a Go binary, an OpenSSL library —
// since uprobes are per inode: filtered to the targets using that file,
// re-rendered when that set changes, and stopped when none is left. What the
// Go request probes and the TLS answer probes share; each says which file a
// target's is and what its program is.
import type { Counter, Gauge } from "prom-client";
import type { Logger } from "../../sinks/log.ts";
import type { AgentMetrics } from "../../sinks/metrics.ts";
import { BpftraceSupervisor } from "./bpftraceSupervisor.ts";
import type { ProbeRecord } from "./probeOutput.ts";

/** What one file's program is. */
export interface ProbedFileSpec {
  /** The program text for these pids; `livePid` is one of them still running (a /proc path through it works in a pod). */
  render: (pids: readonly number[], livePid: number) => string;
  flags?: string[];
  env?: Record<string, string>;
  /** What the logs say of the file: its name first. */
  details: { file: string } & Record<string, unknown>;
}

/** What a source of uprobe programs needs of the agent. */
export interface UprobeContext {
  bpftrace: string;
  procRoot: string;
  agentHostPid: number;
  metrics: AgentMetrics;
  log: Logger;
  /** Kernel time now (CLOCK_MONOTONIC ns, as bpftrace's nsecs). */
  nowNs: () => bigint;
  /** Every raw line a program printed (--record). */
  onLine?: (line: string) => void;
}

export interface UprobeProgramsOptions extends Omit<UprobeContext, "procRoot" | "nowNs"> {
  /** How logs and program names call one: "Go probe", "TLS probe". */
  what: string;
  /** Pids one program filters on, at most. */
  maxPids: number;
  /** Programs attached now, and restarts by reason. */
  attachedGauge: Gauge;
  restarts: Counter<"reason">;
  /** A record one of the programs printed (its hello and ticks are the supervisor's). */
  onRecord: (record: ProbeRecord) => void;
  /** The program following `pid` attached (true) or went away (false). */
  onAttached: (pid: number, attached: boolean) => void;
}

interface ProbedFile {
  spec: ProbedFileSpec;
  pids: Set<number>;
  program: BpftraceSupervisor | null;
  /** The pid set the running program was rendered with. */
  renderedFor: string;
  /** The running program attached once and is counted in the gauge. */
  counted: boolean;
}

export class UprobePrograms {
  readonly #o: UprobeProgramsOptions;
  /** A file's key (dev:inode) → its program. */
  readonly #files = new Map<string, ProbedFile>();
  readonly #fileOf = new Map<number, string>();
  /** Changes are applied one at a time, in order: a program restart takes a while. */
  #work: Promise<void> = Promise.resolve();
  #stopped = false;

  constructor(opts: UprobeProgramsOptions) {
    this.#o = opts;
  }

  /** Runs `change` after the ones before it; returns at once. A failure is logged, not thrown. */
  enqueue(change: () => Promise<void>): void {
    this.#work = this.#work.then(() => (this.#stopped ? undefined : change())).catch((error: unknown) => {
      this.#o.log.warnRateLimited(`${this.#o.what}-update`, `${this.#o.what} update failed`, { error: String(error) });
    });
  }

  /** Targets followed now (or once their file's program attaches). */
  get followed(): number {
    return this.#fileOf.size;
  }

  isFollowed(pid: number): boolean {
    return this.#fileOf.has(pid);
  }

  /** The targets using a file: a file none uses any more may be forgotten. */
  pidsOf(key: string): number {
    return this.#files.get(key)?.pids.size ?? 0;
  }

  /** `pid` uses the file `key`; `spec` is asked for only when the file is new. Rerender the key after. */
  add(pid: number, key: string, spec: () => ProbedFileSpec): void {
    let file = this.#files.get(key);
    if (file === undefined) {
      file = { spec: spec(), pids: new Set(), program: null, renderedFor: "", counted: false };
      this.#files.set(key, file);
    }
    file.pids.add(pid);
    this.#fileOf.set(pid, key);
  }

  /** `pid` is no target any more: the key of its file, to rerender, if it had one. */
  remove(pid: number): string | undefined {
    const key = this.#fileOf.get(pid);
    if (key === undefined) return undefined;
    this.#fileOf.delete(pid);
    this.#files.get(key)?.pids.delete(pid);
    return key;
  }

  /** Starts, restarts or stops the program of one file for its current pids. */
  async rerender(key: string): Promise<void> {
    const file = this.#files.get(key);
    if (file === undefined) return;
    const pids = [...file.pids].sort((a, b) => a - b).slice(0, this.#o.maxPids);
    const renderedFor = pids.join(",");
    if (renderedFor === file.renderedFor) return;
    const { what, log } = this.#o;
    if (file.program !== null) {
      const old = file.program;
      file.program = null;
      if (file.counted) this.#o.attachedGauge.dec();
      file.counted = false;
      await old.stop(); // its pids are told it went away (up(false))
      log.info(`${what} detached`, { pids: file.renderedFor.split(",").map(Number) });
    }
    file.renderedFor = renderedFor;
    if (pids.length === 0) {
      this.#files.delete(key);
      return;
    }
    if (this.#stopped) return;
    if (file.pids.size > pids.length) {
      log.warnRateLimited(`${what}-pids`, `more targets use one file than one ${what} program follows; the rest stay on the socket path`, {
        ...file.spec.details, followed: pids.length, targets: file.pids.size,
      });
    }
    const program = new BpftraceSupervisor({
      variant: "sockets",
      bpftrace: this.#o.bpftrace,
      metrics: this.#o.metrics,
      log,
      agentHostPid: this.#o.agentHostPid,
      state: () => ({ targets: [], endpoints: [], execWatch: false }),
      onInstance: () => {},
      readyTimeoutMs: 30_000,
      ...(this.#o.onLine ? { onLine: this.#o.onLine } : {}),
      program: {
        render: () => file.spec.render(pids, pids.find((pid) => file.pids.has(pid)) ?? pids[0]!),
        flags: file.spec.flags ?? [],
        env: file.spec.env ?? {},
        up: (attached) => {
          for (const pid of pids) this.#o.onAttached(pid, attached && file.pids.has(pid));
        },
        restarted: (reason) => this.#o.restarts.inc({ reason }),
      },
    });
    program.name = `${what} ${file.spec.details.file}`;
    program.onRecord((record) => {
      this.#o.onRecord(record);
      return true;
    });
    file.program = program;
    // Not awaited: a program that cannot attach (its bpftrace crash-loops,
    // its pid is gone) must not hold up the changes behind it.
    program.start().then(
      () => {
        if (file.program !== program) return;
        file.counted = true;
        this.#o.attachedGauge.inc();
        log.info(`${what} attached`, { ...file.spec.details, pids });
      },
      (error: unknown) => {
        if (file.program !== program) return;
        log.warn(`${what} did not attach; these targets stay on the socket path`, { pids, error: String(error) });
      },
    );
  }

  /** Waits for the changes under way, then stops every program. */
  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#work;
    for (const file of this.#files.values()) await file.program?.stop();
  }
}
