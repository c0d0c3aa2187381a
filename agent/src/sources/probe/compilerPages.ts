// What bpftrace keeps of its compiler. Every bpftrace maps LLVM and clang
// (Debian's bpftrace: libLLVM-14, libclang-14) and runs about 73 MiB of their
// code while it compiles its program, then never again: attached, it only reads
// the kernel's buffers and prints. Those pages stay resident, and counted in
// the agent's memory, until the kernel needs the memory back. Once a program
// is attached, the agent asks the kernel to page them out of that bpftrace
// (process_madvise MADV_PAGEOUT, through agent/pageout: Node cannot call it):
// the socket probe alone went from 88 to 26 MiB resident (bench:footprint).
//
// The kernel pages out only what no other process maps too: two bpftrace
// compiling side by side map the same pages, which then stay in both for as
// long as both live. So with page-out on, bpftrace processes take turns to
// compile, one after the other (turn()); a program waits for the compile
// running, a second or two (more for a merge of binaries with DWARF), and a
// compile nobody waits for (a merge of uprobe programs, which run on
// meanwhile) lets every other go first. A turn ends when its program attaches (and is
// paged out) or exits, and after TURN_LIMIT_MS whatever happens, so a hung
// compile holds no one up; whatever was left resident beside it is paged out
// at the next attach, which pages out every attached bpftrace again, and
// every minute while some is left.
//
// Without the helper, or without CAP_SYS_NICE (which process_madvise needs),
// nothing is paged out and nobody waits: said once in the log, and the failure
// is counted.
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { promisify } from "node:util";
import { dirAbove } from "../../installPaths.ts";
import type { Logger } from "../../telemetry/log.ts";
import type { AgentMetrics } from "../../telemetry/metrics.ts";

const HELPER = "agent/pageout/lostwrite-pageout";
/** The helper's exit code when the kernel refuses (EPERM): it will refuse every time. */
const NOT_PERMITTED = 3;

/** Longest a compile holds the others up; bpftrace 0.17 attaches the agent's programs in 0.5–1.6 s here (bench:footprint). */
const TURN_LIMIT_MS = 30_000;

/** The compiler's shared objects, by file name (libLLVM-14.so.1, libclang-14.so.13, libclang-cpp.so.14). */
const COMPILER_FILE = /^lib(LLVM|clang)[-.]/;
/** A mapping's first line in smaps: `start-end perms ...`. */
const MAPPING = /^[0-9a-f]+-[0-9a-f]+ /;
/**
 * Less than this left resident is done. More is pages another process maps
 * too (another bpftrace on the node, or one of the agent's that compiled
 * beside it after a turn ran out): asked again every RETRY_MS until it went.
 */
const LEFT_BYTES = 4 * 1024 * 1024;
const RETRY_MS = 60_000;

/** The built helper, or null when it is not there (`npm run build:pageout` builds it). */
export function pageoutHelper(): string | null {
  const root = dirAbove(HELPER);
  return root === null ? null : path.join(root, HELPER);
}

/**
 * The range of a /proc/<pid>/maps (or smaps) mapping line if it holds the
 * compiler's code or read-only data. Writable mappings are left out: their
 * written pages are the process's own (anonymous) and cannot be paged out
 * without swap.
 */
function compilerRange(line: string): string | null {
  // start-end perms offset dev inode path
  const [range, perms, , , , file] = line.trim().split(/\s+/);
  if (!range || !perms || !file?.startsWith("/") || perms.includes("w")) return null;
  return COMPILER_FILE.test(path.basename(file)) ? range : null;
}

/**
 * The compiler's mappings in a /proc/<pid>/smaps text (a maps text gives the
 * ranges alone): their `start-end` ranges, and the bytes of the files' own
 * pages resident in them. Their anonymous pages (relocated data the loader
 * made read-only after, about 10 MiB) are not counted: they cannot go.
 */
export function compilerMappings(smaps: string): { ranges: string[]; residentBytes: number } {
  const ranges: string[] = [];
  let residentBytes = 0;
  let inCompiler = false;
  for (const line of smaps.split("\n")) {
    if (MAPPING.test(line)) {
      const range = compilerRange(line);
      inCompiler = range !== null;
      if (range !== null) ranges.push(range);
      continue;
    }
    const field = inCompiler ? /^(Rss|Anonymous):\s+(\d+) kB$/.exec(line) : null;
    if (field) residentBytes += (field[1] === "Rss" ? 1 : -1) * Number(field[2]) * 1024;
  }
  return { ranges, residentBytes };
}

/** The compiler's mappings in process `pid`; null when it is gone. */
async function compilerOf(procRoot: string, pid: number): Promise<{ ranges: string[]; residentBytes: number } | null> {
  try {
    return compilerMappings(await readFile(path.join(procRoot, String(pid), "smaps"), "utf8"));
  } catch {
    return null;
  }
}

type RunHelper = (helper: string, args: string[]) => Promise<void>;

const runHelperFile: RunHelper = async (helper, args) => {
  await promisify(execFile)(helper, args, { timeout: 10_000 });
};

interface CompilerPagesOptions {
  /** The helper's path; null: page-out is off. */
  helper: string | null;
  metrics: Pick<AgentMetrics, "probeCompilerPageOuts" | "probeCompilerPagedOutBytes">;
  log: Pick<Logger, "info" | "warn">;
  procRoot?: string;
  runHelper?: RunHelper;
  turnLimitMs?: number;
  retryMs?: number;
}

/** One per agent, shared by every bpftrace it supervises. */
export class CompilerPages {
  readonly #o: Required<Omit<CompilerPagesOptions, "helper">>;
  #helper: string | null;
  #compiling = false;
  readonly #waiting: (() => void)[] = [];
  /** Compiles nobody waits for: after every one in #waiting. */
  readonly #deferred: (() => void)[] = [];
  readonly #attached = new Set<number>();
  /** Page-outs run one at a time: each reads the processes' memory before and after. */
  #pagingOut: Promise<void> = Promise.resolve();
  /** The next page-out of what was left resident, if one is due. */
  #retry: NodeJS.Timeout | null = null;

  constructor(opts: CompilerPagesOptions) {
    this.#o = { procRoot: "/proc", runHelper: runHelperFile, turnLimitMs: TURN_LIMIT_MS, retryMs: RETRY_MS, ...opts };
    this.#helper = opts.helper;
    if (this.#helper === null) this.#o.log.info("bpftrace keeps its compiler's pages resident: the page-out helper is not built (npm run build:pageout)");
  }

  get enabled(): boolean {
    return this.#helper !== null;
  }

  /**
   * Resolves when this bpftrace may start compiling (at once while page-out is
   * off); call the function it resolves with when it attached and was paged
   * out, exited, or was not started after all. Calling it again does nothing.
   * `deferrable`: nobody waits for this compile; every other goes first.
   */
  async turn(deferrable = false): Promise<() => void> {
    if (!this.enabled) return () => {};
    if (this.#compiling) await new Promise<void>((resolve) => (deferrable ? this.#deferred : this.#waiting).push(resolve));
    this.#compiling = true;
    let ended = false;
    const end = (): void => {
      if (ended) return;
      ended = true;
      clearTimeout(limit);
      this.#passTurn();
    };
    const limit = setTimeout(end, this.#o.turnLimitMs).unref();
    return end;
  }

  /** The next waiting bpftrace compiles; none: nobody does. */
  #passTurn(): void {
    const next = this.#waiting.shift() ?? this.#deferred.shift();
    if (next) next();
    else this.#compiling = false;
  }

  /** Pages out the compiler of `pid`, attached now, and again of every other attached bpftrace. */
  attached(pid: number): Promise<void> {
    if (!this.enabled) return Promise.resolve();
    this.#attached.add(pid);
    return this.#queuePageOut();
  }

  /** A page-out of every attached bpftrace after the one running; it never rejects (the supervisor does not wait to hear). */
  #queuePageOut(): Promise<void> {
    const run = this.#pagingOut.then(() => this.#pageOutAll()).catch((err: unknown) => this.#o.log.warn("compiler page-out failed", { error: String(err) }));
    this.#pagingOut = run;
    return run;
  }

  exited(pid: number): void {
    this.#attached.delete(pid);
  }

  async #pageOutAll(): Promise<void> {
    let left = false;
    for (const pid of [...this.#attached]) {
      if (!this.enabled) return;
      left = (await this.#pageOut(pid)) || left;
    }
    if (left && this.#retry === null) {
      this.#retry = setTimeout(() => {
        this.#retry = null;
        void this.#queuePageOut();
      }, this.#o.retryMs).unref();
    }
  }

  /** Pages out what `pid` holds of the compiler; true when some is left resident. */
  async #pageOut(pid: number): Promise<boolean> {
    const helper = this.#helper;
    if (helper === null) return false;
    const before = await compilerOf(this.#o.procRoot, pid);
    if (before === null) {
      this.#attached.delete(pid);
      return false;
    }
    if (before.residentBytes < LEFT_BYTES) return false;
    try {
      await this.#o.runHelper(helper, [String(pid), ...before.ranges]);
    } catch (err) {
      // Gone meanwhile: nothing failed.
      if ((await compilerOf(this.#o.procRoot, pid)) === null) return false;
      this.#o.metrics.probeCompilerPageOuts.inc({ result: "failed" });
      const { code, stderr } = err as { code?: unknown; stderr?: string };
      const error = stderr?.trim() || String(err);
      // Not permitted (exit 3: no CAP_SYS_NICE) or not runnable: so it stays.
      if (code === NOT_PERMITTED || typeof code === "string") {
        this.#o.log.warn("cannot page out bpftrace's compiler: it stays resident, and bpftrace processes no longer take turns to compile", { pid, error });
        this.#turnOff();
        return false;
      }
      this.#o.log.warn("could not page out bpftrace's compiler; asked again later", { pid, error });
      return true;
    }
    this.#o.metrics.probeCompilerPageOuts.inc({ result: "done" });
    const after = await compilerOf(this.#o.procRoot, pid);
    if (after === null) return false;
    if (after.residentBytes < before.residentBytes) this.#o.metrics.probeCompilerPagedOutBytes.inc(before.residentBytes - after.residentBytes);
    return after.residentBytes >= LEFT_BYTES;
  }

  /** A helper that fails once (no CAP_SYS_NICE) fails every time: stop asking, and stop making anyone wait. */
  #turnOff(): void {
    this.#helper = null;
    for (const next of [...this.#waiting.splice(0), ...this.#deferred.splice(0)]) next();
  }
}
