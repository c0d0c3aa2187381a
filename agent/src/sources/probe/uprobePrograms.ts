// One program per probed file — a Go binary, an OpenSSL library — since
// uprobes are per inode; all of them, Go's and TLS's, are merged into one
// bpftrace at rest (uprobeHost.ts, combinedProgram.ts). What the Go request
// probes and the TLS answer probes share; each says which file a target's is
// and what its program is.
//
// A file's program is put in when the first target using the file is seen,
// and then kept: it attaches through a descriptor the agent holds open on the
// file (/proc/<agent>/fd/N), a path that outlives every process of it, so the
// next process of the same binary or library is followed from its first
// instruction and a program never goes with the process it was made for.
// Which processes it reports on is a map in the kernel (followedPids.ts),
// changed by follow messages (followChannel.ts): a target coming or going
// never restarts it; a file coming in gets a bpftrace of its own until the
// programs are merged into one (uprobeHost.ts says when, and what it
// costs). A program whose file no target has used for idleMs is taken out
// and its descriptor closed, and at most maxIdle programs wait idle; a crash
// restarts its bpftrace with the targets of the moment.
import { existsSync } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import path from "node:path";
import type { Counter, Gauge } from "prom-client";
import type { Logger } from "../../telemetry/log.ts";
import type { AgentMetrics } from "../../telemetry/metrics.ts";
import { EVERY_PROGRAM, FollowOp, MAX_PROGRAM_ID, type FollowChannel } from "./followChannel.ts";
import type { FollowedPidsOptions } from "./followedPids.ts";
import type { ProbeRecord } from "./probeOutput.ts";
import { TRACEFS_ROOTS } from "./probeProgram.ts";
import { removeStaleUprobeEvents } from "./staleUprobeEvents.ts";
import type { UprobeHost } from "./uprobeHost.ts";

/** What one file's program is. */
interface ProbedFileSpec {
  /** The file as the agent can open it now, e.g. /host/proc/4242/exe: opened once, and held. */
  path: string;
  /** The program text, attaching through `file` and following `pids` from its start. */
  render: (file: string, follow: Omit<FollowedPidsOptions, "onThreadExit">) => string;
  flags?: string[];
  env?: Record<string, string>;
  /** What the logs say of the file: its name first. */
  details: { file: string } & Record<string, unknown>;
}

/** What a source of uprobe programs needs of the agent. */
export interface UprobeContext {
  /** The bpftrace every probed file's program runs in. */
  host: UprobeHost;
  procRoot: string;
  metrics: AgentMetrics;
  log: Logger;
  /** Kernel time now (CLOCK_MONOTONIC ns, as bpftrace's nsecs). */
  nowNs: () => bigint;
  /** Every raw line a program printed (--record). */
  onLine?: (line: string) => void;
  /** Tells running programs whom to follow; shared by every uprobe program, which it gives their ids. */
  follow: FollowChannel;
  /** Every exec is followed until the agent decides (its rules can match a new program), as in the socket probe. */
  execWatch: boolean;
  /** Whether a pid is a target now: a program announcing a process the agent has not given it is believed for targets only. */
  isTarget: (pid: number) => boolean;
}

interface UprobeProgramsOptions extends Omit<UprobeContext, "nowNs"> {
  /** How logs and program names call one: "Go probe", "TLS probe". */
  what: string;
  /** Programs attached now, and restarts by reason. */
  attachedGauge: Gauge;
  restarts: Counter<"reason">;
  /** A record one of the programs printed (its hello, ticks and follow lines are handled here). */
  onRecord: (record: ProbeRecord) => void;
  /**
   * A program follows `pid` (true) since kernel time `atNs`, or no longer
   * does (false) from `atNs`: a request that started before it followed was
   * not seen whole.
   */
  onAttached: (pid: number, attached: boolean, atNs: bigint) => void;
  nowNs: () => bigint;
  /** How long a program is kept once no target uses its file (default 10 minutes). */
  idleMs?: number;
  /** Programs kept while no target uses their file, at most (default 4): the longest idle go first. */
  maxIdle?: number;
}

interface ProbedFile {
  spec: ProbedFileSpec;
  /** Targets using the file now. */
  pids: Set<number>;
  /** The targets the program said it follows. */
  followed: Set<number>;
  handle: FileHandle | null;
  id: number;
  /** Its program is in the shared bpftrace (or being put in). */
  hosted: boolean;
  /** Its program was taken out because bpftrace did not attach with it: its targets stay on the socket path. */
  failed: boolean;
  /** The program attached once and is counted in the gauge. */
  counted: boolean;
  /** When the last target left (Date.now()); null while one uses the file. */
  idleSince: number | null;
}

const DEFAULT_IDLE_MS = 10 * 60_000;
const DEFAULT_MAX_IDLE = 4;

export class UprobePrograms {
  readonly #o: UprobeProgramsOptions & { idleMs: number; maxIdle: number };
  /** A file's key (dev:inode) → its program. */
  readonly #files = new Map<string, ProbedFile>();
  readonly #fileOf = new Map<number, string>();
  /** Changes are applied one at a time, in order. */
  #work: Promise<void> = Promise.resolve();
  #sweeper: NodeJS.Timeout | null = null;
  #stopped = false;

  constructor(opts: UprobeProgramsOptions) {
    this.#o = { idleMs: DEFAULT_IDLE_MS, maxIdle: DEFAULT_MAX_IDLE, ...opts };
    this.#sweeper = setInterval(() => this.enqueue(() => this.#stopIdle()), Math.min(60_000, this.#o.idleMs));
    this.#sweeper.unref();
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

  /** `pid` uses the file `key`; `spec` is asked for only when the file has no program yet. */
  async add(pid: number, key: string, spec: () => ProbedFileSpec): Promise<void> {
    const known = this.#fileOf.get(pid);
    if (known !== undefined && known !== key) await this.remove(pid);
    let file = this.#files.get(key);
    if (file === undefined) {
      file = { spec: spec(), pids: new Set(), followed: new Set(), handle: null, id: -1, hosted: false, failed: false, counted: false, idleSince: null };
      this.#files.set(key, file);
    } else if (!file.hosted && !file.failed) {
      // Its file could not be opened through the process it was first seen
      // in (gone already: a kubectl lives a tenth of a second): through this one.
      file.spec = spec();
    }
    file.pids.add(pid);
    file.idleSince = null;
    this.#fileOf.set(pid, key);
    if (file.failed) return;
    if (!file.hosted) await this.#start(key, file);
    else await this.#send(FollowOp.follow, file.id, pid);
  }

  /** `pid` is no target any more. Its program stays, for the next process of its file. */
  async remove(pid: number): Promise<void> {
    const key = this.#fileOf.get(pid);
    if (key === undefined) return;
    this.#fileOf.delete(pid);
    const file = this.#files.get(key);
    if (file === undefined) return;
    file.pids.delete(pid);
    if (file.pids.size === 0) file.idleSince = Date.now();
    // A process that exited was let go in the kernel at its exit.
    if (file.hosted && existsSync(path.join(this.#o.procRoot, String(pid)))) {
      await this.#send(FollowOp.unfollow, file.id, pid);
    }
    if (file.followed.delete(pid)) this.#attached(file, pid, false, this.#o.nowNs());
    if (file.pids.size === 0) await this.#stopIdle();
  }

  /** A program follows `pid` since `atNs`, or no longer does from `atNs`: told to the source, and logged. */
  #attached(file: ProbedFile, pid: number, attached: boolean, atNs: bigint): void {
    this.#o.onAttached(pid, attached, atNs);
    this.#o.log.info(attached ? `${this.#o.what} follows` : `${this.#o.what} no longer follows`, { pid, file: file.spec.details.file, program: file.id });
  }

  /** A process its exec made followed everywhere, and that is no target: every program lets it go. */
  async unfollowEverywhere(pid: number): Promise<void> {
    if ([...this.#files.values()].some((file) => file.hosted)) await this.#send(FollowOp.unfollow, EVERY_PROGRAM, pid);
  }

  /** Waits for the changes under way, then takes every program out. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#sweeper) clearInterval(this.#sweeper);
    await this.#work;
    for (const file of this.#files.values()) this.#stopProgram(file);
    this.#files.clear();
  }

  async #send(op: FollowOp, id: number, pid: number): Promise<void> {
    try {
      await this.#o.follow.send(op, id, pid);
    } catch (error) {
      this.#o.log.warnRateLimited(`${this.#o.what}-follow`, `${this.#o.what}: follow message not sent; the target stays on the socket path`, {
        pid, error: String(error),
      });
    }
  }

  async #start(key: string, file: ProbedFile): Promise<void> {
    const { what, log } = this.#o;
    const id = this.#o.follow.allocate();
    if (id === null) {
      log.warnRateLimited(`${what}-ids`, `more files probed than ${MAX_PROGRAM_ID + 1} programs can follow; their targets stay on the socket path`, file.spec.details);
      return;
    }
    let handle: FileHandle;
    try {
      handle = await open(file.spec.path, "r");
    } catch (error) {
      this.#o.follow.release(id);
      log.warn(`${what}: cannot open the file; its targets stay on the socket path`, { ...file.spec.details, error: String(error) });
      return;
    }
    file.handle = handle;
    file.id = id;
    const stale = await removeStaleUprobeEvents(process.pid, TRACEFS_ROOTS);
    if (stale > 0) log.info(`${what}: removed uprobe events a killed bpftrace left on this agent's descriptors`, { events: stale });
    file.hosted = true;
    // bpftrace runs in the agent's PID and mount namespaces: this path is the agent's descriptor.
    const through = `/proc/${process.pid}/fd/${handle.fd}`;
    // Not awaited: putting a file in restarts the shared bpftrace, which must
    // not hold up the changes behind it (their follow messages are sent again
    // once it attached: see up()).
    void this.#o.host.add({
      id,
      name: `${what} ${file.spec.details.file}`,
      // At every (re)start: the targets of the moment, followed from BEGIN.
      render: () => file.spec.render(through, { programId: id, pids: [...file.pids], execWatch: this.#o.execWatch }),
      flags: file.spec.flags ?? [],
      env: file.spec.env ?? {},
      // Gone at once (what it followed is no longer followed from now, before
      // a new program's follow lines); back after the changes before it.
      up: (attached) => (attached ? this.enqueue(() => this.#up(file)) : this.#down(file)),
      restarted: (reason) => this.#o.restarts.inc({ reason }),
      failed: (error) => this.enqueue(() => this.#failed(file, error)),
      onRecord: (record) => this.#onRecord(key, file, record),
      askForBeat: () => this.#o.follow.send(FollowOp.beat, id, 0),
      ...(this.#o.onLine ? { onLine: this.#o.onLine } : {}),
    });
  }

  /** The bpftrace with this file's program in it went away: its processes are no longer followed. */
  #down(file: ProbedFile): void {
    const now = this.#o.nowNs();
    for (const pid of file.followed) this.#attached(file, pid, false, now);
    file.followed.clear();
  }

  /** A bpftrace with this file's program in it attached (and reports for it). */
  async #up(file: ProbedFile): Promise<void> {
    if (!file.hosted) return;
    const { what, log } = this.#o;
    if (!file.counted) {
      file.counted = true;
      this.#o.attachedGauge.inc();
      log.info(`${what} attached`, { ...file.spec.details, program: file.id, pids: [...file.pids] });
    }
    // Targets that came while it (re)started: their follow messages found no program.
    for (const pid of file.pids) if (!file.followed.has(pid)) await this.#send(FollowOp.follow, file.id, pid);
  }

  async #failed(file: ProbedFile, error: string): Promise<void> {
    if (!file.hosted) return;
    this.#o.log.warn(`${this.#o.what} did not attach; its targets stay on the socket path`, { ...file.spec.details, error });
    file.failed = true;
    // No bpftrace holds it: its own did not attach.
    await this.#release(file)();
  }

  #onRecord(key: string, file: ProbedFile, record: ProbeRecord): void {
    if (record.type === "follow") {
      if (file.followed.has(record.pid)) return;
      if (!file.pids.has(record.pid)) {
        // Followed from its exec, announced at its first call into the file,
        // before the agent told the program (or before it ever could: gone).
        if (!this.#o.isTarget(record.pid) || this.#fileOf.has(record.pid)) return;
        file.pids.add(record.pid);
        file.idleSince = null;
        this.#fileOf.set(record.pid, key);
      }
      file.followed.add(record.pid);
      this.#attached(file, record.pid, true, record.since);
    } else if (record.type === "unfollow") {
      if (file.followed.delete(record.pid)) this.#attached(file, record.pid, false, record.ts);
    } else {
      this.#o.onRecord(record);
    }
  }

  /**
   * Takes the file's program out: its lines count no more from now (its
   * followed pids are told it went away, up(false)). Its descriptor and id
   * are freed once no bpftrace holds them, which for a merged program is at
   * the next merge: not waited for here, where the changes behind this one,
   * a new file's among them, would wait too.
   */
  #stopProgram(file: ProbedFile): void {
    if (!file.hosted) return;
    const gone = this.#o.host.remove(file.id);
    const release = this.#release(file);
    void gone.then(release).catch((error: unknown) => {
      this.#o.log.warnRateLimited(`${this.#o.what}-release`, `${this.#o.what}: a file's descriptor could not be closed`, { ...file.spec.details, error: String(error) });
    });
    this.#o.log.info(`${this.#o.what} detached`, { ...file.spec.details, program: file.id });
  }

  /** Counts the file's program out now; returns what closes its descriptor and frees its id, once no bpftrace holds them. */
  #release(file: ProbedFile): () => Promise<void> {
    file.hosted = false;
    if (file.counted) this.#o.attachedGauge.dec();
    file.counted = false;
    const { handle, id } = file;
    file.handle = null;
    return async () => {
      await handle?.close();
      this.#o.follow.release(id);
    };
  }

  /** Programs whose file no target has used for idleMs, and the longest idle past maxIdle. */
  #stopIdle(): Promise<void> {
    for (;;) {
      const now = Date.now();
      const idle = [...this.#files].filter(([, file]) => file.idleSince !== null).sort(([, a], [, b]) => a.idleSince! - b.idleSince!);
      const stale = idle.find(([, file], i) => now - file.idleSince! >= this.#o.idleMs || idle.length - i > this.#o.maxIdle);
      if (stale === undefined) return Promise.resolve();
      const [key, file] = stale;
      this.#files.delete(key);
      this.#stopProgram(file);
    }
  }
}
