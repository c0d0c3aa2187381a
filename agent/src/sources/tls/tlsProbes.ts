// TLS probing of the targets that call OpenSSL: each OpenSSL file (a libssl
// or an executable with OpenSSL in it) gets its own bpftrace program
// (uprobes are per inode), filtered to the targets using it and re-rendered
// when that set changes. A target with no OpenSSL mapped yet (python maps
// libssl when it first imports ssl) is looked at again every
// `recheckIntervalMs`. Verdicts go to TlsAnswers; its drain timer releases
// what waited for them.
import { startAdaptiveTicker, type AdaptiveTicker } from "../../adaptiveTicker.ts";
import type { Logger } from "../../sinks/log.ts";
import type { AgentMetrics } from "../../sinks/metrics.ts";
import { BpftraceSupervisor } from "../probe/bpftraceSupervisor.ts";
import type { ProbeRecord } from "../probe/probeOutput.ts";
import type { TargetChanges } from "../targets/targetWatcher.ts";
import { openSslOf, type ExportsCache } from "./openSslOf.ts";
import type { TlsAnswers } from "./tlsAnswers.ts";
import { MAX_TLS_PIDS_PER_PROGRAM, renderTlsProgram } from "./tlsProbeProgram.ts";

export interface TlsProbesOptions {
  answers: TlsAnswers;
  /** A verdict line, to be judged with the socket probe's records (in their queue). */
  onVerdict: (record: ProbeRecord) => void;
  /** The TLS program of `pid` attached (true) or went away (false). */
  onAttached?: (pid: number, attached: boolean) => void;
  bpftrace: string;
  procRoot: string;
  agentHostPid: number;
  metrics: AgentMetrics;
  log: Logger;
  /** Kernel time now (CLOCK_MONOTONIC ns, as bpftrace's nsecs). */
  nowNs: () => bigint;
  /** How often waiting records are released (default 25 ms). */
  drainIntervalMs?: number;
  /** How often targets without OpenSSL are looked at again (default 2000 ms). */
  recheckIntervalMs?: number;
  /** Every line a TLS program printed, raw (--record). */
  onLine?: (line: string) => void;
}

interface Library {
  path: string;
  pids: Set<number>;
  program: BpftraceSupervisor | null;
  renderedFor: string;
  counted: boolean;
}

export class TlsProbes {
  readonly name = "tls probes";
  readonly #o: Required<TlsProbesOptions>;
  /** dev:inode → library. */
  readonly #libraries = new Map<string, Library>();
  readonly #libraryOf = new Map<number, string>();
  /** Targets with no OpenSSL found yet. */
  readonly #pending = new Set<number>();
  readonly #exportsCache: ExportsCache = new Map();
  #ticker: AdaptiveTicker | null = null;
  #recheck: NodeJS.Timeout | null = null;
  #work: Promise<void> = Promise.resolve();
  #stopped = false;

  constructor(opts: TlsProbesOptions) {
    this.#o = { drainIntervalMs: 25, recheckIntervalMs: 2000, onLine: () => {}, onAttached: () => {}, ...opts };
  }

  start(): void {
    const answers = this.#o.answers;
    this.#ticker = startAdaptiveTicker(() => answers.drain(this.#o.nowNs()), () => answers.busy, this.#o.drainIntervalMs, 1000);
    this.#recheck = setInterval(() => {
      if (this.#pending.size > 0) void this.onTargets({ added: [...this.#pending].map((pid) => ({ pid })), removed: [] });
    }, this.#o.recheckIntervalMs);
    this.#recheck.unref();
  }

  /** A target change; returns at once, the programs follow in the background. */
  onTargets(changes: { added: readonly { pid: number }[]; removed: readonly { pid: number }[] } | TargetChanges): Promise<void> {
    this.#work = this.#work.then(() => this.#apply(changes)).catch((error: unknown) => {
      this.#o.log.warnRateLimited("tls-probes", "TLS probe update failed", { error: String(error) });
    });
    return Promise.resolve();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#ticker?.stop();
    if (this.#recheck) clearInterval(this.#recheck);
    await this.#work;
    for (const library of this.#libraries.values()) await library.program?.stop();
    this.#o.answers.flush();
  }

  async #apply({ added, removed }: { added: readonly { pid: number }[]; removed: readonly { pid: number }[] }): Promise<void> {
    if (this.#stopped) return;
    const touched = new Set<string>();
    for (const { pid } of removed) {
      this.#pending.delete(pid);
      const key = this.#libraryOf.get(pid);
      if (key === undefined) continue;
      this.#libraryOf.delete(pid);
      this.#libraries.get(key)?.pids.delete(pid);
      touched.add(key);
    }
    for (const { pid } of added) {
      if (this.#libraryOf.has(pid)) continue;
      const found = await openSslOf(this.#o.procRoot, pid, this.#exportsCache);
      if (typeof found === "string") {
        // Rechecked later, while it is a target; the maps of a process gone say so.
        if (found.startsWith("cannot read its maps")) this.#pending.delete(pid);
        else this.#pending.add(pid);
        continue;
      }
      this.#pending.delete(pid);
      let library = this.#libraries.get(found.key);
      if (library === undefined) {
        library = { path: found.path, pids: new Set(), program: null, renderedFor: "", counted: false };
        this.#libraries.set(found.key, library);
      }
      library.pids.add(pid);
      this.#libraryOf.set(pid, found.key);
      touched.add(found.key);
    }
    for (const key of touched) await this.#rerender(key);
  }

  /** Starts, restarts or stops the program of one library for its current pids. */
  async #rerender(key: string): Promise<void> {
    const library = this.#libraries.get(key);
    if (library === undefined) return;
    const pids = [...library.pids].sort((a, b) => a - b).slice(0, MAX_TLS_PIDS_PER_PROGRAM);
    const renderedFor = pids.join(",");
    if (renderedFor === library.renderedFor) return;
    if (library.program !== null) {
      const old = library.program;
      library.program = null;
      if (library.counted) this.#o.metrics.tlsProbesAttached.dec();
      library.counted = false;
      await old.stop();
      for (const pid of library.renderedFor.split(",").map(Number)) this.#attached(pid, false);
      this.#o.log.info("TLS probe detached", { pids: library.renderedFor.split(",").map(Number) });
    }
    library.renderedFor = renderedFor;
    if (pids.length === 0 || this.#stopped) {
      if (pids.length === 0) this.#libraries.delete(key);
      return;
    }
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
        render: () => renderTlsProgram({ library: library.path, pids }),
        flags: [],
        env: {},
        up: (attached) => {
          for (const pid of pids) this.#attached(pid, attached && library.pids.has(pid));
        },
        restarted: (reason) => this.#o.metrics.tlsProbeRestarts.inc({ reason }),
      },
    });
    program.name = `tls probe ${library.path}`;
    program.onRecord((record) => {
      if (record.type === "tls_close") this.#o.onVerdict(record);
      return true;
    });
    library.program = program;
    program.start().then(
      () => {
        if (library.program !== program) return;
        library.counted = true;
        this.#o.metrics.tlsProbesAttached.inc();
        this.#o.log.info("TLS probe attached", { library: library.path, pids });
      },
      (error: unknown) => {
        if (library.program !== program) return;
        this.#o.log.warn("TLS probe did not attach; these targets' TLS answers are read on the wire", { pids, error: String(error) });
      },
    );
  }

  #attached(pid: number, attached: boolean): void {
    this.#o.answers.setAttached(pid, attached);
    this.#o.onAttached(pid, attached);
  }
}
