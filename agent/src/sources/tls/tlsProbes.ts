// TLS probing of the targets that call OpenSSL: each OpenSSL file (a libssl
// or an executable with OpenSSL in it) gets its own program
// (UprobePrograms; every file's program runs in one bpftrace, uprobeHost.ts), kept while the file can be used again and told which of
// the processes using it to follow. A target with no OpenSSL mapped yet (python maps
// libssl when it first imports ssl) is looked at again. One that just exec'd
// is looked at every few ms through its first seconds: a one-shot python
// script maps libssl about 20 ms after its exec and is gone 35 ms later, and
// its file's program is what follows every later client from its exec. After
// that, and for targets found running, twice as long each time up to a
// minute: most such targets never will (Go operators), and each look reads
// its maps.
// Verdicts and attachments go into the probe records' queue, to the loss
// graph's TLS answers (tlsAnswers.ts), in the order they came.
import type { ProbeRecord } from "../probe/probeOutput.ts";
import { UprobePrograms, type UprobeContext } from "../probe/uprobePrograms.ts";
import { newExportsCache, openSslOf, type ExportsCache } from "./openSslOf.ts";
import { renderTlsProgram } from "./tlsProbeProgram.ts";

/** Targets added and removed (a TargetWatcher change, or a recheck of the targets without OpenSSL yet). */
interface PidChanges {
  /** `atExec`: it became a target at its exec, so it is starting now. */
  added: readonly { pid: number; atExec?: boolean }[];
  removed: readonly { pid: number }[];
}

interface TlsProbesOptions extends UprobeContext {
  /** A verdict line, to be judged with the socket probe's records (in their queue). */
  onVerdict: (record: ProbeRecord) => void;
  /** The TLS program of `pid` attached (true, following it since kernel time `atNs`) or went away (false): to be told in order with the records. */
  onAttached: (pid: number, attached: boolean, atNs: bigint) => void;
  /** How often a target without OpenSSL is looked at again while young, and first after that (default 10 ms; then twice as long each time, up to 60 s). */
  recheckIntervalMs?: number;
  /** How long after its exec a target is young (default 3 s). */
  youngMs?: number;
}

/** The longest wait between two looks at a target without OpenSSL. */
const MAX_RECHECK_WAIT_MS = 60_000;

/** When a target without OpenSSL is looked at next: `dueMs`; `youngUntilMs` ends the frequent looks; then `nextWaitMs` doubles. */
export interface NextLook {
  dueMs: number;
  youngUntilMs: number;
  nextWaitMs: number;
}

/**
 * The look after one that found no OpenSSL (`previous` undefined: the first):
 * often while the target is young, then backing off, since each look reads
 * its maps and most targets never map OpenSSL.
 */
export function nextLook(previous: NextLook | undefined, nowMs: number, atExec: boolean, o: { recheckIntervalMs: number; youngMs: number }): NextLook {
  const next = previous ? { ...previous } : { dueMs: 0, youngUntilMs: atExec ? nowMs + o.youngMs : 0, nextWaitMs: o.recheckIntervalMs };
  if (nowMs < next.youngUntilMs) return { ...next, dueMs: nowMs + o.recheckIntervalMs };
  return { ...next, dueMs: nowMs + next.nextWaitMs, nextWaitMs: Math.min(next.nextWaitMs * 2, MAX_RECHECK_WAIT_MS) };
}

export class TlsProbes {
  readonly name = "tls probes";
  readonly #o: Required<TlsProbesOptions>;
  readonly #programs: UprobePrograms;
  /** Targets with no OpenSSL found yet → when to look again. */
  readonly #pending = new Map<number, NextLook>();
  readonly #exportsCache: ExportsCache = newExportsCache();
  #started = false;
  #recheck: NodeJS.Timeout | null = null;

  constructor(opts: TlsProbesOptions) {
    this.#o = { recheckIntervalMs: 10, youngMs: 3000, onLine: () => {}, ...opts };
    this.#programs = new UprobePrograms({
      what: "TLS probe",
      attachedGauge: this.#o.metrics.tlsProbesAttached,
      restarts: this.#o.metrics.tlsProbeRestarts,
      onRecord: (record) => {
        if (record.type === "tls_close") this.#o.onVerdict(record);
      },
      ...this.#o,
    });
  }

  start(): void {
    this.#started = true;
    this.#scheduleRecheck();
  }

  /** One timer, for the earliest look due. */
  #scheduleRecheck(): void {
    if (this.#recheck) clearTimeout(this.#recheck);
    this.#recheck = null;
    if (this.#pending.size === 0 || !this.#started) return;
    const earliest = Math.min(...[...this.#pending.values()].map((next) => next.dueMs));
    this.#recheck = setTimeout(() => {
      this.#recheck = null;
      const now = Date.now();
      const due = [...this.#pending].filter(([, next]) => next.dueMs <= now).map(([pid]) => ({ pid }));
      if (due.length > 0) void this.onTargets({ added: due, removed: [] });
      else this.#scheduleRecheck();
    }, Math.max(0, earliest - Date.now()));
    this.#recheck.unref();
  }

  /** A target change; returns at once, the programs follow in the background. */
  onTargets(changes: PidChanges): Promise<void> {
    this.#programs.enqueue(() => this.#apply(changes));
    return Promise.resolve();
  }

  async stop(): Promise<void> {
    this.#started = false;
    if (this.#recheck) clearTimeout(this.#recheck);
    this.#recheck = null;
    await this.#programs.stop();
  }

  #lookAgainLater(pid: number, atExec: boolean): void {
    this.#pending.set(pid, nextLook(this.#pending.get(pid), Date.now(), atExec, this.#o));
  }

  /**
   * The socket probe reported on `pid` (its connection closed, a send
   * failed): if its OpenSSL is still to be found, look now, while it runs.
   * A one-shot client can live less than the first rechecks on a busy node,
   * and its library's program is what follows every later one.
   */
  lookNow(pid: number): void {
    const next = this.#pending.get(pid);
    if (next === undefined || next.dueMs <= Date.now()) return;
    next.dueMs = Date.now();
    this.#scheduleRecheck();
  }

  /** A process its exec made followed, and that is no target. */
  unfollow(pid: number): Promise<void> {
    return this.#programs.unfollowEverywhere(pid);
  }

  async #apply({ added, removed }: PidChanges): Promise<void> {
    for (const { pid } of removed) {
      this.#pending.delete(pid);
      await this.#programs.remove(pid);
    }
    for (const { pid, atExec = false } of added) {
      if (this.#programs.isFollowed(pid)) {
        this.#pending.delete(pid); // announced by its file's program
        continue;
      }
      const found = await openSslOf(this.#o.procRoot, pid, this.#exportsCache);
      if (typeof found === "string") {
        // Looked at again while it is a target; a process gone (no maps) is not.
        if (found.startsWith("cannot read its maps")) this.#pending.delete(pid);
        else this.#lookAgainLater(pid, atExec);
        continue;
      }
      this.#pending.delete(pid);
      // While this change runs, the agent's own descriptor (a one-shot script
      // may be gone already); later, when its program could not be started
      // then, through the process's /proc entry again.
      let held = true;
      const through = `/proc/${process.pid}/fd/${found.handle.fd}`;
      try {
        await this.#programs.add(pid, found.key, () => ({
          get path() {
            return held ? through : found.path;
          },
          render: (file, follow) => renderTlsProgram({ library: file, ...follow }),
          details: { file: found.path },
        }));
      } finally {
        held = false;
        await found.handle.close();
      }
    }
    this.#scheduleRecheck();
  }
}
