// The bpftrace processes that run the uprobe programs of many probed files
// (combinedProgram.ts joins them), Go binaries and OpenSSL files alike. At
// rest the host runs one bpftrace for all its files instead of one per file: a
// bpftrace holds about 30 MiB of its own memory for LLVM, clang and the
// kernel's BTF however small its program, and each file's probes add less
// than that (`npm run bench:footprint` measures both).
//
// bpftrace 0.17 cannot add probes to a running program, and compiling a Go
// binary's probes takes seconds (more with DWARF, which bpftrace loads). So a
// file appearing (not a process: those are follow messages) gets a program
// of its own at once, in a bpftrace of its own, compiled as soon as no other
// bpftrace compiles (they take turns, so that each one's compiler can be
// paged out after: compilerPages.ts): its processes wait for their own
// file's compile and at most the one running (a one-shot kubectl is gone in
// a fraction of a second); a merge waiting to compile lets it go first. Once the
// files have not changed for mergeAfterMs, the programs running are merged
// into one: a compile of every file's probes, made while they run on; once
// it attached they are retired and it reports from then. Its lines until
// then are dropped (the old programs saw the same events) but for its follow
// lines, told at the switch as following from then; the old ones' lines
// count no more from the switch, and they are stopped after (a bpftrace's
// exit takes seconds: it detaches every probe). So no process already
// followed is left on the socket path for a compile, only a request in
// flight across the switch is the socket path's, as across a crash.
//
// A file going costs no compile: a program of its own is stopped; in a merged
// program its lines count no more at once, and its probes go at the next
// merge (its descriptor and follow id are freed when no bpftrace holds them).
// A merge is counted in lostwrite_uprobe_program_reloads_total and timed in
// the log; a crash is each part's restart, counted by its kind. For a compile
// one more bpftrace runs.
//
// A file whose probes bpftrace refuses must not take the others down: its
// own program does not attach, and it is told it failed (its processes stay
// on the socket path); a merge that does not attach leaves the programs
// running apart.
import type { Logger } from "../../telemetry/log.ts";
import type { AgentMetrics, ProbeRestartReason } from "../../telemetry/metrics.ts";
import { BpftraceSupervisor } from "./bpftraceSupervisor.ts";
import type { CompilerPages } from "./compilerPages.ts";
import { combinePrograms } from "./combinedProgram.ts";
import type { ProbeRecord } from "./probeOutput.ts";

/** A combined program started by the host, and what the host does with it. */
interface RunningProgram {
  /** The parts rendered into it at its start, dropped ones included (their probes run until it stops). */
  parts: ReadonlyMap<number, HostedPart>;
  /** Its parts not dropped. */
  live: () => HostedPart[];
  /** null once it attached, else why not. */
  attached: Promise<string | null>;
  /** From now on its lines count (they were held back until then). */
  takeOver: () => void;
  /** From now on nothing it says counts; its parts are told it went away. */
  retire: () => void;
  /** From now on nothing it says of this part counts, nor is the part in it at a restart; the part is told it went away. */
  drop: (id: number) => void;
  stop: () => Promise<void>;
}

/** One file's program, as a part of the combined one. */
interface HostedPart {
  /** Its follow id (followChannel.ts): its maps' suffix and its lines' tag. */
  id: number;
  /** What the logs call it. */
  name: string;
  /** Its whole program, rendered afresh at every (re)start with the processes of the moment. */
  render: () => string;
  flags: readonly string[];
  env: Readonly<Record<string, string>>;
  /** One of its lines (hello, tick and beat are the host's). */
  onRecord: (record: ProbeRecord) => void;
  /** Every raw line of its part (--record), its tag kept: the parser takes it off on replay too. */
  onLine?: (line: string) => void;
  /** A program with this part in it took over and attached (true), or went away (false). */
  up: (attached: boolean) => void;
  /** Asks its program for a `beat` line (a follow message for its id): the program's answer when its ticks stop. */
  askForBeat: () => Promise<void>;
  /** The program crashed and is being started again with this part in it. */
  restarted: (reason: ProbeRestartReason) => void;
  /** The part was taken out because its program did not attach. */
  failed: (error: string) => void;
}

interface UprobeHostOptions {
  bpftrace: string;
  agentHostPid: number;
  metrics: AgentMetrics;
  log: Logger;
  /** Where the programs take turns to compile (compilerPages.ts). */
  compilerPages?: CompilerPages;
  /** How long a (re)started program may take to attach (default 30 s). */
  readyTimeoutMs?: number;
  /** How long the files must stay unchanged before the programs are merged into one (default a minute). */
  mergeAfterMs?: number;
}

const MERGE_AFTER_MS = 60_000;

export class UprobeHost {
  readonly #o: UprobeHostOptions & { readyTimeoutMs: number; mergeAfterMs: number };
  /** The parts wanted, by id. */
  readonly #parts = new Map<number, HostedPart>();
  /** The programs that took over: their lines count. */
  #running: RunningProgram[] = [];
  /** Every program started and not stopped yet: compiling, running, or retired and stopping. */
  readonly #alive = new Set<RunningProgram>();
  /** Ids of parts taken out → who waits for no bpftrace to hold them. */
  readonly #leaving = new Map<number, (() => void)[]>();
  /** The programs being stopped, and when they will have. */
  readonly #stopping = new Map<RunningProgram, Promise<void>>();
  #mergeTimer: NodeJS.Timeout | null = null;
  #merging = false;
  #stopped = false;

  constructor(opts: UprobeHostOptions) {
    this.#o = { readyTimeoutMs: 30_000, mergeAfterMs: MERGE_AFTER_MS, ...opts };
  }

  /** Files in the running programs. */
  get parts(): number {
    return this.#running.reduce((n, p) => n + p.live().length, 0);
  }

  /** bpftrace processes running programs that took over. */
  get programs(): number {
    return this.#running.length;
  }

  /** Puts a file's program in, in a bpftrace of its own; resolves once it attached (or failed, told to the part). */
  add(part: HostedPart): Promise<void> {
    this.#parts.set(part.id, part);
    this.#quiet();
    return this.#startAlone(part);
  }

  /**
   * Takes a file's program out: its lines count no more from now. Resolves
   * once no bpftrace holds it (its descriptor and id may then be freed): at
   * once when it ran alone, at the next merge when it was merged.
   */
  remove(id: number): Promise<void> {
    if (!this.#parts.delete(id)) return Promise.resolve();
    for (const program of this.#alive) if (program.parts.has(id)) program.drop(id);
    for (const program of this.#running.filter((p) => p.live().length === 0)) {
      this.#running = this.#running.filter((p) => p !== program);
      program.retire();
      void this.#discard(program);
    }
    this.#quiet();
    if (!this.#held(id)) return Promise.resolve();
    return new Promise((resolve) => this.#leaving.set(id, [...(this.#leaving.get(id) ?? []), resolve]));
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#mergeTimer) clearTimeout(this.#mergeTimer);
    this.#running = [];
    // Their parts are told they went away (up(false)).
    await Promise.all([...this.#alive].map((p) => this.#discard(p)));
  }

  #held(id: number): boolean {
    return [...this.#alive].some((p) => p.parts.has(id));
  }

  /** Stops a program and forgets it, once however often asked; the parts taken out that no bpftrace holds any more are let go. */
  #discard(program: RunningProgram): Promise<void> {
    if (!this.#alive.has(program)) return Promise.resolve();
    let stopping = this.#stopping.get(program);
    if (stopping === undefined) {
      stopping = program.stop().finally(() => {
        this.#alive.delete(program);
        this.#stopping.delete(program);
        for (const [id, waiters] of this.#leaving) {
          if (this.#held(id)) continue;
          this.#leaving.delete(id);
          for (const release of waiters) release();
        }
      });
      this.#stopping.set(program, stopping);
    }
    return stopping;
  }

  async #startAlone(part: HostedPart): Promise<void> {
    const { log } = this.#o;
    const started = Date.now();
    const program = this.#start(new Map([[part.id, part]]), false);
    const error = await program.attached;
    if (error !== null || this.#stopped || program.live().length === 0) {
      await this.#discard(program);
      if (error !== null && !this.#stopped && this.#parts.get(part.id) === part) {
        this.#parts.delete(part.id);
        part.failed(error);
        log.warn("uprobe program did not attach; its file is given up on, its targets stay on the socket path", { file: part.name, error });
      }
      return;
    }
    this.#running.push(program);
    program.takeOver();
    log.info("uprobe program started", { file: part.name, programs: this.#running.length, tookMs: Date.now() - started });
  }

  /** (Re)arms the merge: once the files have not changed for mergeAfterMs. */
  #quiet(): void {
    if (this.#mergeTimer) clearTimeout(this.#mergeTimer);
    this.#mergeTimer = null;
    if (this.#stopped) return;
    this.#mergeTimer = setTimeout(() => {
      this.#mergeTimer = null;
      void this.#merge();
    }, this.#o.mergeAfterMs);
    this.#mergeTimer.unref();
  }

  /** More than one program runs, or one still holds the probes of a file taken out. */
  #mergeDue(): boolean {
    return this.#running.length > 1 || this.#running.some((p) => p.live().length < p.parts.size);
  }

  /** One program of every running file, made while the programs run on; they are retired once it attached. */
  async #merge(): Promise<void> {
    if (this.#merging || this.#stopped || !this.#mergeDue()) return;
    const { log, metrics } = this.#o;
    const old = [...this.#running];
    const parts = new Map(old.flatMap((p) => p.live().map((part) => [part.id, part] as const)));
    const started = Date.now();
    metrics.uprobeProgramReloads.inc({ reason: old.length > 1 ? "merged" : "file_removed" });
    this.#merging = true;
    try {
      // Nobody waits for it: a new file's program or a restart compiles first.
      const next = this.#start(parts, true);
      const error = await next.attached;
      if (error !== null || this.#stopped || next.live().length === 0) {
        await this.#discard(next);
        if (error !== null && !this.#stopped) log.warn("uprobe programs could not be merged into one; they run on apart", { files: [...parts.values()].map((p) => p.name), error });
        return;
      }
      // The switch: the replaced programs' parts are told they went away, and
      // their lines are no longer read; the new one's parts follow their
      // processes from now on. Programs started for files that came during
      // the compile run on beside it, to the next merge.
      const replaced = old.filter((p) => this.#running.includes(p));
      for (const p of replaced) p.retire();
      this.#running = [...this.#running.filter((p) => !replaced.includes(p)), next];
      next.takeOver();
      log.info("uprobe programs merged into one", { files: next.live().map((p) => p.name), replaced: replaced.length, programs: this.#running.length, tookMs: Date.now() - started });
      await Promise.all(replaced.map((p) => this.#discard(p)));
    } finally {
      this.#merging = false;
    }
    if (this.#mergeDue()) this.#quiet();
  }

  /**
   * Starts a program with `parts`. Until takeOver() its lines are held back
   * (another program may still report on the same processes): its follow
   * lines are kept, to be told at the switch as following from then, and the
   * rest dropped, being about requests the program running then also saw or
   * that began before the switch. `attached`: null once it attached, else why not.
   * `deferrable`: nobody waits for its compile (a merge): others compile first.
   */
  #start(parts: Map<number, HostedPart>, deferrable: boolean): RunningProgram {
    const list = [...parts.values()];
    const env: Record<string, string> = {};
    for (const part of list) Object.assign(env, part.env);
    let attached = false;
    let everAttached = false;
    let holding = true;
    /** Replaced by a newer program: nothing it says counts any more. */
    let retired = false;
    /** Parts taken out: what they say counts no more, and a restart leaves them out. */
    const dropped = new Set<number>();
    const live = (): HostedPart[] => list.filter((part) => !dropped.has(part.id));
    /** Follow lines held back, per part: pid -> the record. */
    const held = new Map<number, Map<number, ProbeRecord & { type: "follow" }>>();
    let failedBeforeHello: (error: string) => void = () => {};
    const exitedEarly = new Promise<string>((resolve) => (failedBeforeHello = resolve));
    const program = new BpftraceSupervisor({
      variant: "sockets",
      bpftrace: this.#o.bpftrace,
      metrics: this.#o.metrics,
      log: this.#o.log,
      agentHostPid: this.#o.agentHostPid,
      kind: "uprobe",
      state: () => ({ targets: [], endpoints: [], execWatch: false }),
      onInstance: () => {},
      readyTimeoutMs: this.#o.readyTimeoutMs,
      ...(this.#o.compilerPages ? { compilerPages: this.#o.compilerPages, compileDeferrable: deferrable } : {}),
      program: {
        // At every (re)start: each part with its processes of the moment
        // (all of them when none is left: such a program is being stopped).
        render: () => combinePrograms((live().length > 0 ? live() : list).map((part) => ({ id: part.id, text: part.render() }))),
        flags: [...new Set(list.flatMap((part) => part.flags))],
        env,
        up: (up) => {
          // Every part's BEGIN says hello; the first one is the program's.
          if (up === attached || retired) return;
          attached = up;
          if (!holding) for (const part of live()) part.up(up);
        },
        restarted: (reason) => {
          if (retired) return;
          if (!everAttached) failedBeforeHello(`bpftrace ${reason} before it attached`);
          else for (const part of live()) part.restarted(reason);
        },
        // Any part's follow id reaches the program: one asked answers for all.
        askForBeat: () => (live()[0] ?? list[0]!).askForBeat(),
      },
    });
    program.name = `uprobe programs (${list.length})`;
    program.onRecord((record, id, line) => {
      if (record.type === "hello") everAttached = true;
      if (retired) return false;
      const part = id === undefined ? undefined : parts.get(id);
      if (part !== undefined && dropped.has(part.id)) return false;
      if (part === undefined) {
        // Every line of a part is tagged (combinedProgram.ts): this one is no part's.
        if (record.type !== "hello" && record.type !== "tick" && record.type !== "beat" && record.type !== "attached" && record.type !== "lost") {
          this.#o.log.warnRateLimited("uprobe-untagged", "a line of the uprobe programs names no part; dropped", { type: record.type, part: id });
        }
        return false;
      }
      if (holding) {
        if (record.type === "follow") held.set(part.id, (held.get(part.id) ?? new Map<number, ProbeRecord & { type: "follow" }>()).set(record.pid, record));
        else if (record.type === "unfollow") held.get(part.id)?.delete(record.pid);
        return false;
      }
      part.onLine?.(line);
      if (record.type !== "hello" && record.type !== "tick" && record.type !== "beat") part.onRecord(record);
      return false;
    });
    const attachedOutcome = Promise.race([
      program.start().then(
        () => null,
        (error: unknown) => String(error),
      ),
      exitedEarly,
    ]).then((outcome) => {
      if (outcome === null) everAttached = true;
      return outcome;
    });
    const running: RunningProgram = {
      parts,
      live,
      attached: attachedOutcome,
      stop: () => program.stop(),
      retire: () => {
        if (attached && !holding && !retired) for (const part of live()) part.up(false);
        retired = true;
      },
      drop: (id) => {
        const part = parts.get(id);
        if (part === undefined || dropped.has(id)) return;
        dropped.add(id);
        if (attached && !holding && !retired) part.up(false);
      },
      takeOver: () => {
        holding = false;
        // bpftrace's nsecs is CLOCK_MONOTONIC, which hrtime reads.
        const now = process.hrtime.bigint();
        for (const part of live()) {
          if (attached) part.up(true);
          for (const record of held.get(part.id)?.values() ?? []) part.onRecord({ ...record, ts: now, since: now });
        }
      },
    };
    this.#alive.add(running);
    return running;
  }
}
