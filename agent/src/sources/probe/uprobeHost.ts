// One bpftrace that runs the uprobe programs of many probed files
// (combinedProgram.ts joins them); the agent has one for its Go binaries and
// one for its OpenSSL files (uprobeSources.ts says why two). One process
// instead of one per file: a bpftrace holds about 30 MiB of its own memory
// for LLVM, clang and the kernel's BTF however small its program, and each
// file's probes add little to that (`npm run bench:footprint` measures both).
//
// The trade-off: bpftrace 0.17 cannot add probes to a running program, so a
// file appearing or going (not a process: those are follow messages)
// restarts the program with the files of the moment, a compile of every
// file's probes (seconds for Go binaries, more for one with DWARF, which
// bpftrace loads and keeps). The new program is made while the old one runs
// on; once it attached, the old one is stopped and the new one reports from
// then: its lines until then are dropped (the old program saw the same
// events) but for its follow lines, told at the switch as following from
// then; the old one's lines count no more from the switch, and it is stopped
// after (a bpftrace's exit takes seconds: it detaches every probe). So the
// processes of the files already followed are not left on the socket path
// for a restart, only a request in flight across the switch is the socket
// path's, as across a crash; a new file's processes wait for the whole
// compile. Changes that
// come during a restart are taken by the next, so files appearing together
// cost one restart. A restart is counted in
// lostwrite_uprobe_program_reloads_total and timed in the log; a crash is
// each part's restart, counted by its kind. For the overlap two programs of
// a kind run: the peak memory is two.
//
// A file whose probes bpftrace refuses must not take the others down: when a
// restart that added files does not attach (bpftrace exits before its hello,
// or never says it), the old program runs on, and the files it added are
// told they failed: their processes stay on the socket path.
import type { Logger } from "../../telemetry/log.ts";
import type { AgentMetrics, ProbeRestartReason } from "../../telemetry/metrics.ts";
import { BpftraceSupervisor } from "./bpftraceSupervisor.ts";
import { combinePrograms } from "./combinedProgram.ts";
import type { ProbeRecord } from "./probeOutput.ts";

/** A combined program started by the host, and what the host does with it. */
interface RunningProgram {
  /** null once it attached, else why not. */
  attached: Promise<string | null>;
  /** From now on its lines count (they were held back until then). */
  takeOver: () => void;
  /** From now on nothing it says counts; its parts are told it went away. */
  retire: () => void;
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
  /** One of its lines (hello and tick are the host's). */
  onRecord: (record: ProbeRecord) => void;
  /** Every raw line of its part (--record), its tag kept: the parser takes it off on replay too. */
  onLine?: (line: string) => void;
  /** The program with this part in it attached (true) or went away (false). */
  up: (attached: boolean) => void;
  /** Asks its program for a `beat` line (a follow message for its id): the program's answer when its ticks stop. */
  askForBeat: () => Promise<void>;
  /** The program crashed and is being started again with this part in it. */
  restarted: (reason: ProbeRestartReason) => void;
  /** The part was taken out because the program with it did not attach. */
  failed: (error: string) => void;
}

interface UprobeHostOptions {
  bpftrace: string;
  agentHostPid: number;
  metrics: AgentMetrics;
  log: Logger;
  /** How long a (re)started program may take to attach (default 30 s). */
  readyTimeoutMs?: number;
}

export class UprobeHost {
  readonly #o: UprobeHostOptions & { readyTimeoutMs: number };
  /** The parts wanted, by id. */
  readonly #parts = new Map<number, HostedPart>();
  /** The parts in the running program (rendered into it at its last start). */
  #running = new Map<number, HostedPart>();
  #program: RunningProgram | null = null;
  /** A restart is due: the parts wanted differ from the running ones. */
  #dirty = false;
  #reloading: Promise<void> | null = null;
  #stopped = false;

  constructor(opts: UprobeHostOptions) {
    this.#o = { readyTimeoutMs: 30_000, ...opts };
  }

  /** Files in the running program. */
  get parts(): number {
    return this.#running.size;
  }

  /** Puts a file's program in; resolves once the program with it started (or failed, told to the part). */
  add(part: HostedPart): Promise<void> {
    this.#parts.set(part.id, part);
    return this.#reload();
  }

  /** Takes a file's program out; resolves once no running program holds it. */
  remove(id: number): Promise<void> {
    if (!this.#parts.delete(id)) return Promise.resolve();
    return this.#reload();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#reloading;
    await this.#stopProgram();
  }

  /** Restarts the program with the parts wanted, once for every change made before it begins. */
  #reload(): Promise<void> {
    this.#dirty = true;
    this.#reloading ??= (async () => {
      try {
        while (this.#dirty && !this.#stopped) {
          this.#dirty = false;
          await this.#restart();
        }
      } finally {
        this.#reloading = null;
      }
    })();
    return this.#reloading;
  }

  async #stopProgram(): Promise<void> {
    const program = this.#program;
    this.#program = null;
    this.#running = new Map();
    await program?.stop(); // its parts are told it went away (up(false))
  }

  async #restart(): Promise<void> {
    const { log, metrics } = this.#o;
    const before = new Set(this.#running.keys());
    const wanted = new Map(this.#parts);
    const added = [...wanted.keys()].filter((id) => !before.has(id));
    const removed = [...before].filter((id) => !wanted.has(id));
    if (added.length === 0 && removed.length === 0 && this.#program !== null) return;
    const reason = added.length > 0 ? "file_added" : "file_removed";
    const started = Date.now();
    const old = this.#program;
    if (wanted.size === 0) {
      await this.#stopProgram();
      if (old) log.info("uprobe programs stopped: no file left to probe", { removed });
      return;
    }
    if (old) metrics.uprobeProgramReloads.inc({ reason });
    // Made before the old one is stopped: the old program goes on following
    // its processes while the new one compiles and attaches.
    const next = this.#start(wanted);
    const error = await next.attached;
    if (error !== null) {
      await next.stop();
      // Not attached. The files it added are the suspects: the old program
      // still runs without them, and goes on.
      const suspects = added.map((id) => wanted.get(id)!);
      for (const part of suspects) {
        this.#parts.delete(part.id);
        part.failed(error);
      }
      log.warn("uprobe program did not attach; the files just added are given up on, their targets stay on the socket path", {
        files: suspects.map((p) => p.name), error,
      });
      if (suspects.length > 0 && (old === null || removed.length > 0)) this.#dirty = true;
      return;
    }
    // The switch: the old program's parts are told it went away, and its
    // lines are no longer read; the new one's parts follow their processes
    // from now on. Then the old bpftrace is stopped (its exit, which detaches
    // every probe, takes seconds).
    old?.retire();
    this.#program = next;
    this.#running = wanted;
    next.takeOver();
    await old?.stop();
    log.info(old ? "uprobe program restarted with the files of the moment" : "uprobe program started", {
      files: [...wanted.values()].map((p) => p.name), added, removed, tookMs: Date.now() - started,
    });
  }

  /**
   * Starts a program with `parts`. Until takeOver() its lines are held back
   * (another program may still report on the same processes): its follow
   * lines are kept, to be told at the switch as following from then, and the
   * rest dropped, being about requests the program running then also saw or
   * that began before the switch. `attached`: null once it attached, else why not.
   */
  #start(parts: Map<number, HostedPart>): RunningProgram {
    const list = [...parts.values()];
    const env: Record<string, string> = {};
    for (const part of list) Object.assign(env, part.env);
    let attached = false;
    let everAttached = false;
    let holding = true;
    /** Replaced by a newer program: nothing it says counts any more. */
    let retired = false;
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
      program: {
        // At every (re)start: each part with its processes of the moment.
        render: () => combinePrograms(list.map((part) => ({ id: part.id, text: part.render() }))),
        flags: [...new Set(list.flatMap((part) => part.flags))],
        env,
        up: (up) => {
          // Every part's BEGIN says hello; the first one is the program's.
          if (up === attached || retired) return;
          attached = up;
          if (!holding) for (const part of list) part.up(up);
        },
        restarted: (reason) => {
          if (retired) return;
          if (!everAttached) failedBeforeHello(`bpftrace ${reason} before it attached`);
          else for (const part of list) part.restarted(reason);
        },
        // Any part's follow id reaches the program: the first one's answers for all.
        askForBeat: () => list[0]!.askForBeat(),
      },
    });
    program.name = `uprobe programs (${list.length})`;
    program.onRecord((record, id, line) => {
      if (record.type === "hello") everAttached = true;
      if (retired) return false;
      const part = id === undefined ? undefined : parts.get(id);
      if (part === undefined) {
        // Every line of a part is tagged (combinedProgram.ts): this one is no part's.
        if (record.type !== "hello" && record.type !== "tick" && record.type !== "attached" && record.type !== "lost") {
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
      if (record.type !== "hello" && record.type !== "tick") part.onRecord(record);
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
    return {
      attached: attachedOutcome,
      stop: () => program.stop(),
      retire: () => {
        retired = true;
        if (attached && !holding) for (const part of list) part.up(false);
      },
      takeOver: () => {
        holding = false;
        // bpftrace's nsecs is CLOCK_MONOTONIC, which hrtime reads.
        const now = process.hrtime.bigint();
        for (const part of list) {
          if (attached) part.up(true);
          for (const record of held.get(part.id)?.values() ?? []) part.onRecord({ ...record, ts: now, since: now });
        }
      },
    };
  }
}
