// Runs bpftrace and keeps it running: readiness waits for the program's
// `hello` (printed by BEGIN, i.e. after every probe attached); a bpftrace that
// exits, or stops beating and does not answer when asked (the kernel can skip
// its timer ticks alone), is restarted, re-rendered with the current state so
// a restart never forgets a target: at once after a healthy run, with growing
// backoff and jitter only in a crash loop. bpftrace is started under
// `setpriv --pdeathsig KILL`, so the kernel kills it when the agent dies, even
// by SIGKILL: a killed agent leaves no probe behind.
//
// Changes (targets, endpoints) go through the control channel and count only
// when the probe acknowledges them: an unacknowledged message is sent again,
// and one that is never acknowledged is counted and makes /readyz fail.
// Changes made while bpftrace is not attached wait and are sent, in order,
// once it is.
//
// The socket probe is rendered without its send hook while no target needs
// it (sendHook.ts); bpftrace cannot add or remove a probe of a running
// program, so a change that makes it needed (a target on the socket path)
// restarts the program with it at once, and one that leaves it unneeded
// restarts the program without it once that has held for a while (a Go
// program restarted after a crash follows its process again within a
// second). A restart forgets the connections the program knew; a new one
// without the hook learns connections at connect, and is told the Go
// operators' older ones, which their Go programs found (adoptedConnections.ts).
//
// Every bpftrace of the agent waits for its turn to compile, and once its
// program is attached has the compiler it ran paged out (compilerPages.ts):
// two compiling at once would keep each other's compiler pages resident.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { execa, type ResultPromise } from "execa";
import type { Logger } from "../../telemetry/log.ts";
import type { AgentMetrics, ProbeProgramKind, ProbeRestartReason } from "../../telemetry/metrics.ts";
import { ControlChannel, ControlOp, encodeControl, endpointMessage, forgetSyscallCounterMessage, type SyscallCounterKey } from "./controlChannel.ts";
import { kernelKeys, type EndpointKey } from "./endpointKey.ts";
import { recursionMisses } from "./missedRuns.ts";
import { parseProbeLine, type ProbeRecord } from "./probeOutput.ts";
import type { CompilerPages } from "./compilerPages.ts";
import { bpftraceEnv, renderProgram, type ProbeState, type ProbeVariant } from "./probeProgram.ts";
import { sendHookNeed } from "./sendHook.ts";
import type { GoConnectionSocket } from "./adoptedConnections.ts";

type Log = Pick<Logger, "info" | "warn" | "warnRateLimited">;

/** A program other than the socket probe: no control channel, its own text and health metrics. */
interface OtherProgram {
  /** The program text, rendered afresh at every (re)start. */
  render: () => string;
  /** Extra bpftrace flags, e.g. ["--unsafe"]. */
  flags: readonly string[];
  /** Extra environment, e.g. BPFTRACE_STRLEN. */
  env: Readonly<Record<string, string>>;
  /** Attached and beating (true) or not. */
  up: (attached: boolean) => void;
  restarted: (reason: ProbeRestartReason) => void;
  /** Asks the running program for a `beat` line (a follow message, followChannel.ts); resolves once asked. */
  askForBeat: () => Promise<void>;
}

interface SupervisorOptions {
  variant: ProbeVariant;
  /** Run this program instead of the socket probe of `variant`. */
  program?: OtherProgram;
  bpftrace: string;
  metrics: AgentMetrics;
  log: Log;
  /** The current targets and endpoints, read at every (re)start. */
  state: () => ProbeState;
  /** Every raw stdout line kept (for `--record`): the unparsable ones and the records kept. */
  onLine?: (line: string) => void;
  /** A new bpftrace instance started: its counters start at zero. */
  onInstance: () => void;
  /** The agent's pid as the kernel sees it (the host pid, also in a pod). */
  agentHostPid: number;
  /** The Go operators' connections their Go programs found, of one process or all: each new socket probe is told them (adoptedConnections.ts). */
  goConnections?: (pid?: number) => GoConnectionSocket[];
  /** Where bpftrace processes take turns to compile, and have their compiler paged out once attached (compilerPages.ts). */
  compilerPages?: CompilerPages;
  /** Nobody waits for this program's first compile (a merge of programs that run on meanwhile): every other compile goes first. A restart after it attached does not wait so. */
  compileDeferrable?: boolean;
  /** How long no target must have needed the send hook before the socket probe is restarted without it. */
  sendHookDropDelayMs?: number;
  /** What lostwrite_probe_missed_runs_total calls this program (default "socket"). */
  kind?: ProbeProgramKind;
  /** How long to wait for one acknowledgement, and how often to send a message before giving up. */
  ackTimeoutMs?: number;
  ackAttempts?: number;
  /** A run attached at least this long was healthy: its restart is immediate. */
  healthyRunMs?: number;
  heartbeatTimeoutMs?: number;
  readyTimeoutMs?: number;
  maxBackoffMs?: number;
}

/** The programs' timer tick (`interval:s:1`). */
const TICK_NS = 1_000_000_000n;

/**
 * Long enough for a Go program that crashed to be restarted and follow its
 * processes again (the uprobe programs restart within a second), so that one
 * crash costs the socket probe one restart for the hook, not a second one
 * to drop it between.
 */
const SEND_HOOK_DROP_DELAY_MS = 10_000;

// RLIMIT_MEMLOCK: not raisable without CAP_SYS_RESOURCE, and not needed on
// kernels that account BPF memory to the cgroup (5.11+). The instruction
// boundary warning: bpftrace cannot check a raw offset in a stripped binary;
// the Go probes attach only at function entries, taken from the pclntab.
const KNOWN_HARMLESS = /RLIMIT_MEMLOCK|Could not determine instruction boundary/;

/**
 * glibc's malloc for every bpftrace. bpftrace 0.17 frees most of what its
 * compile allocated, but glibc keeps freed memory at the top of the heap (its
 * trim threshold grows to 32 MiB with the allocations made) and one arena per
 * thread: a fixed 1 MiB threshold and one arena gave back 15 MiB of the 95 MiB
 * anonymous memory of the uprobe programs of three Go binaries and a libssl,
 * 8 MiB of the socket probe's 42 (measured on each program alone), as much
 * as trimming at every free (threshold 0), which would cost bpftrace's output
 * loop a brk call per line.
 */
const BPFTRACE_MALLOC_ENV = { MALLOC_TRIM_THRESHOLD_: "1048576", MALLOC_ARENA_MAX: "1" } as const;

/**
 * Ticks the kernel skipped between two that ran, from their kernel times. The
 * tick is a timer probe: it runs in the timer's interrupt, and the kernel
 * skips it, uncounted (no recursion_misses for timer programs), when that
 * interrupt lands in another BPF program.
 */
export function skippedTicks(previousNs: bigint, ns: bigint): number {
  if (ns <= previousNs) return 0;
  return Math.max(0, Number((ns - previousNs + TICK_NS / 2n) / TICK_NS) - 1);
}

interface RestartDelayInput {
  /** The instance that exited had attached and run at least healthyRunMs. */
  healthy: boolean;
  /** Instances in a row that died unhealthy before this one (ignored after a healthy run). */
  restarts: number;
  maxBackoffMs: number;
}

/**
 * Milliseconds to wait before starting bpftrace again: 100–200 after a
 * healthy run; in a crash loop half to all of 1 s, 2 s, 4 s, … 32 s, capped
 * at maxBackoffMs. The jitter (`random`, in [0, 1)) keeps the agents of many
 * nodes that fail together from retrying together.
 */
export function restartDelayMs({ healthy, restarts, maxBackoffMs }: RestartDelayInput, random: () => number = Math.random): number {
  const backoff = healthy ? 200 : Math.min(maxBackoffMs, 1000 * 2 ** Math.min(restarts, 5));
  return backoff / 2 + random() * (backoff / 2);
}

export class BpftraceSupervisor {
  name = "probe";
  private readonly opts: Required<Omit<SupervisorOptions, "onLine" | "program" | "goConnections" | "compilerPages" | "compileDeferrable">> &
    Pick<SupervisorOptions, "onLine" | "program" | "goConnections" | "compilerPages" | "compileDeferrable">;
  private readonly control = new ControlChannel();
  private child: ResultPromise | undefined;
  private stopping = false;
  private lastBeat = 0;
  private restarts = 0;
  private watchdog: NodeJS.Timeout | undefined;
  private restartTimer: NodeJS.Timeout | undefined;
  private readonly workDir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-probe-"));
  private seq = 0;
  /** Kernel time of the running instance's last timer tick; 0n before its first. */
  private lastTickNs = 0n;
  private askingForBeat = false;
  /** Told of the next line that proves the program runs (see beatHeard()). */
  private beatListener: (() => void) | null = null;
  private readonly exited = new WeakSet<ResultPromise>();
  private readonly killedForSilence = new WeakSet<ResultPromise>();
  /** Stopped to be started again with or without the send hook (see sendHook.ts). */
  private readonly stoppedForSendHook = new WeakSet<ResultPromise>();
  /** Since when (Date.now()) the running socket probe has had a send hook no target needs; 0: needed, or none. */
  private sendHookUnneededSince = 0;
  /** Whether the running socket probe has its send hook; null for another program. */
  private instanceSendHook: boolean | null = null;
  /**
   * The next socket probe starts with its send hook whatever the state says
   * then: it was stopped to take it, and the need may have passed meanwhile
   * (a Go program restarted while the probe stopped follows its target per
   * request again). The restart, which forgets every connection, was paid
   * for the hook; it is dropped at the next restart for another reason.
   */
  private sendHookOnNextStart = false;
  private attachedAt = 0;
  /** Ends the running instance's turn to compile (compilerPages.ts); a no-op once ended. */
  private endTurn: () => void = () => {};
  private readonly acks = new Map<number, (acknowledged: boolean) => void>();
  private readyWaiters: { attached: () => void; stopped: () => void }[] = [];
  /** Messages waiting for an attached probe, oldest first (bounded: see sendConfirmed()). */
  private pending: { words: number[]; done: () => void }[] = [];
  private flushing: Promise<void> | null = null;
  private spawned = false;
  private recordListener: (record: ProbeRecord, part: number | undefined, line: string) => boolean = () => true;
  /** recursion_misses of the running instance's programs already counted; 0 at each spawn. */
  private missesCounted = 0;
  private countingMisses = false;
  ready = false;
  /** False once a change was not acknowledged after every retry, until one is. */
  controlHealthy = true;

  constructor(opts: SupervisorOptions) {
    this.opts = {
      heartbeatTimeoutMs: 5000,
      readyTimeoutMs: 60000,
      maxBackoffMs: 30000,
      ackTimeoutMs: 1000,
      ackAttempts: 3,
      healthyRunMs: 500,
      sendHookDropDelayMs: SEND_HOOK_DROP_DELAY_MS,
      kind: "socket",
      ...opts,
    };
  }

  /**
   * Every record the supervisor does not consume itself, with the part of a
   * combined program it came from (combinedProgram.ts) and its raw line;
   * false: dropped (not recorded either). Set before start.
   */
  onRecord(listener: (record: ProbeRecord, part: number | undefined, line: string) => boolean): void {
    this.recordListener = listener;
  }

  async start(): Promise<void> {
    if (!this.opts.program) await this.control.open();
    await this.launch();
    await this.whenReady(this.opts.readyTimeoutMs);
    if (!this.stopping) this.watchdog = setInterval(() => void this.checkHeartbeat(), 1000);
  }

  whenReady(timeoutMs: number): Promise<void> {
    if (this.ready) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`bpftrace not attached after ${timeoutMs} ms`)), timeoutMs);
      this.readyWaiters.push({
        attached: () => {
          clearTimeout(timer);
          resolve();
        },
        stopped: () => {
          clearTimeout(timer);
          reject(new Error("stopped before bpftrace attached"));
        },
      });
    });
  }

  /** Applies a change in the kernel and resolves once the probe confirms it. */
  async addTarget(pid: number): Promise<void> {
    this.attachSendHookIfNeeded();
    await this.sendConfirmed(encodeControl(ControlOp.addTarget, BigInt(pid)));
  }

  async removeTarget(pid: number): Promise<void> {
    await this.sendConfirmed(encodeControl(ControlOp.removeTarget, BigInt(pid)));
  }

  /**
   * Deletes a pid's counters in the kernel: the maps keyed on the pid alone
   * by pid, the ones keyed longer (@transient, @failed_sends) entry by entry,
   * `keyed` naming them, as bpftrace cannot delete by a part of a key.
   */
  async forgetCounters(pid: number, keyed: readonly SyscallCounterKey[] = []): Promise<void> {
    await this.sendConfirmed([...encodeControl(ControlOp.forgetCounters, BigInt(pid)), ...keyed.flatMap(forgetSyscallCounterMessage)]);
  }

  /** The target's requests are read by the Go probe (true) or no longer (false); see REQUEST-LEVEL TARGETS in the probe. */
  async setRequestLevel(pid: number, on: boolean): Promise<void> {
    if (!on) this.attachSendHookIfNeeded();
    await this.sendConfirmed(encodeControl(ControlOp.requestLevel, BigInt(pid), 0n, on ? 1n : 0n));
    // Its connections found before: the probe takes only a request-level target's.
    if (on) await Promise.all((this.opts.goConnections?.(pid) ?? []).map((connection) => this.adoptConnection(connection)));
  }

  /**
   * A Go operator's connection, as its Go program found the socket: the
   * socket probe follows it from now on (ADOPTED CONNECTIONS in the probe),
   * also where it has no send hook to learn it by. Only the sockets variant
   * reads sockets this way; the syscalls variant always has its send path.
   */
  async adoptConnection(connection: GoConnectionSocket): Promise<void> {
    if (this.opts.program || this.opts.variant !== "sockets") return;
    await this.sendConfirmed(encodeControl(ControlOp.adoptConnection, connection.sk, connection.task, BigInt(connection.pid)));
  }

  async setEndpoint(endpoint: EndpointKey, present: boolean): Promise<void> {
    await this.sendConfirmed(kernelKeys(endpoint).flatMap((key) => endpointMessage(present, key)));
  }

  /**
   * Resolves once the probe applied the message, or once it was given up on
   * (counted, and /readyz fails). While bpftrace is not attached the message
   * waits; the instance that attaches next applies it.
   */
  private sendConfirmed(words: number[]): Promise<void> {
    // Before the first start there is nothing to tell: the first program is
    // rendered with the state as it is then.
    if (!this.spawned) return Promise.resolve();
    return new Promise((done) => {
      // Far more changes than any node has targets means the probe has been
      // down a long time: the oldest are dropped, counted (the next start
      // renders the current state anyway, so nothing stays wrong).
      if (this.pending.length >= 4096) {
        this.opts.metrics.eventsDropped.inc({ stage: "probeControl", reason: "capacity" });
        this.pending.shift()!.done();
      }
      this.pending.push({ words, done });
      this.flush();
    });
  }

  private flush(): void {
    if (!this.ready || this.flushing) return;
    this.flushing = (async () => {
      while (this.ready && this.pending.length) {
        const message = this.pending[0]!;
        const applied = await this.deliver(message.words);
        // Detached meanwhile: the message waits for the next instance.
        if (!applied && !this.ready) break;
        this.pending.shift();
        message.done();
      }
    })().finally(() => {
      this.flushing = null;
      if (this.ready && this.pending.length) this.flush();
    });
  }

  /** True once acknowledged; false if given up on or the probe detached. */
  private async deliver(words: number[]): Promise<boolean> {
    for (let attempt = 1; attempt <= this.opts.ackAttempts && this.ready; attempt++) {
      const seq = ++this.seq;
      let timer: NodeJS.Timeout | undefined;
      const acked = new Promise<boolean>((resolve) => {
        this.acks.set(seq, resolve);
        timer = setTimeout(() => resolve(false), this.opts.ackTimeoutMs);
      });
      try {
        await this.control.send([...words, ...encodeControl(ControlOp.ack, BigInt(seq))]);
      } catch (err) {
        this.opts.log.warn("control message not sent", { seq, error: String(err) });
      }
      const ok = await acked;
      clearTimeout(timer);
      this.acks.delete(seq);
      if (ok && this.ready) {
        if (!this.controlHealthy) this.opts.log.info("probe acknowledges control messages again", { seq });
        this.controlHealthy = true;
        return true;
      }
      if (this.ready) this.opts.log.warn("probe did not acknowledge a control message; sending it again", { seq, attempt });
    }
    if (!this.ready) return false;
    this.controlHealthy = false;
    this.opts.metrics.probeControlFailures.inc();
    this.opts.log.warn("probe never acknowledged a control message: a target or endpoint change may be missing in the kernel", {
      attempts: this.opts.ackAttempts,
    });
    return false;
  }

  /**
   * Restarts a socket probe rendered without its send hook once the current
   * state needs it (a message sent meanwhile waits for the new program, which
   * is rendered with the state it carries anyway).
   */
  private attachSendHookIfNeeded(): void {
    const child = this.child;
    if (this.instanceSendHook !== false || !child || this.stopping || this.exited.has(child) || this.stoppedForSendHook.has(child)) return;
    const need = sendHookNeed(this.opts.state());
    if (!need.needed) return;
    this.opts.log.info("a target needs the send hook; restarting the socket probe with it", need.why === "target" ? { pid: need.pid } : { why: need.why });
    this.opts.metrics.probeRestarts.inc({ reason: "send_hook" });
    this.stoppedForSendHook.add(child);
    this.sendHookOnNextStart = true;
    child.kill("SIGINT");
  }

  /**
   * Restarts a socket probe that has its send hook once no target has needed
   * it for sendHookDropDelayMs (checked every second, by the watchdog): then
   * no send of the node pays for it.
   */
  private detachSendHookIfUnneeded(): void {
    const child = this.child;
    const hooked = this.opts.variant === "sockets" && this.instanceSendHook === true && child && this.ready && !this.stopping && !this.stoppedForSendHook.has(child);
    if (!hooked || sendHookNeed(this.opts.state()).needed) {
      this.sendHookUnneededSince = 0;
      return;
    }
    const now = Date.now();
    if (this.sendHookUnneededSince === 0) this.sendHookUnneededSince = now;
    if (now - this.sendHookUnneededSince < this.opts.sendHookDropDelayMs) return;
    this.sendHookUnneededSince = 0;
    this.opts.log.info("no target needs the send hook any more; restarting the socket probe without it", { unneededForMs: this.opts.sendHookDropDelayMs });
    this.opts.metrics.probeRestarts.inc({ reason: "send_hook" });
    this.stoppedForSendHook.add(child);
    child.kill("SIGINT");
  }

  /** Spawns bpftrace once it is its turn to compile. */
  private async launch(): Promise<void> {
    const endTurn = (await this.opts.compilerPages?.turn(this.opts.compileDeferrable === true && !this.spawned)) ?? (() => {});
    if (this.stopping) {
      endTurn();
      return;
    }
    this.endTurn = endTurn;
    try {
      this.spawn();
    } catch (err) {
      this.endTurn = () => {};
      endTurn();
      throw err;
    }
  }

  private spawn(): void {
    this.spawned = true;
    this.missesCounted = 0;
    this.lastTickNs = 0n;
    const other = this.opts.program;
    let program: string;
    if (other) {
      program = other.render();
    } else {
      const state = this.opts.state();
      const sendHook = this.opts.variant !== "sockets" || this.sendHookOnNextStart || sendHookNeed(state).needed;
      this.sendHookOnNextStart = false;
      if (!sendHook && this.instanceSendHook !== false) this.opts.log.info("socket probe without its send hook: every target is followed per request, and no rule needs it");
      this.instanceSendHook = sendHook;
      program = renderProgram(this.opts.variant, { ...state, sendHook });
      // Told once it attaches (the messages wait for it): it knows no connection yet.
      for (const connection of this.opts.goConnections?.() ?? []) void this.adoptConnection(connection);
    }
    const file = path.join(this.workDir, "program.bt");
    writeFileSync(file, program);
    const args = other
      ? ["--pdeathsig", "KILL", this.opts.bpftrace, "-f", "json", ...other.flags, file, String(this.opts.agentHostPid)]
      : ["--pdeathsig", "KILL", this.opts.bpftrace, "-f", "json", file, String(this.opts.agentHostPid), String(this.control.port)];
    const child = execa("setpriv", args, {
      buffer: false,
      reject: false,
      stdin: "ignore",
      env: { ...bpftraceEnv(), ...BPFTRACE_MALLOC_ENV, ...other?.env },
    });
    this.child = child;
    this.lastBeat = Date.now();
    this.attachedAt = 0;
    this.opts.onInstance();
    void this.readStdout(child);
    void this.readStderr(child);
    void child.then((result) => this.onExit(child, result.exitCode, result.signal ?? null));
  }

  private async readStdout(child: ResultPromise): Promise<void> {
    try {
      for await (const line of child.iterable({ from: "stdout" })) this.onLine(String(line));
    } catch {
      // the exit handler reports and restarts
    }
  }

  private async readStderr(child: ResultPromise): Promise<void> {
    try {
      for await (const line of child.iterable({ from: "stderr" })) {
        const text = String(line);
        if (!KNOWN_HARMLESS.test(text) && text.trim()) this.opts.log.warn("bpftrace", { stderr: text });
      }
    } catch {
      // the exit handler reports and restarts
    }
  }

  private onLine(line: string): void {
    if (!line.trim()) return;
    const parsed = parseProbeLine(line);
    if (!parsed.ok) {
      this.opts.onLine?.(line);
      this.opts.metrics.probeParseErrors.inc();
      this.opts.log.warn("unparsable probe output", { error: parsed.error });
      return;
    }
    const record = parsed.record;
    if (record.type === "hello") {
      // A combined program's every part says hello; the first is the program's.
      if (!this.ready) this.compiled();
      this.lastBeat = Date.now();
      this.attachedAt = Date.now();
      this.ready = true;
      this.setUp(true);
      for (const waiter of this.readyWaiters.splice(0)) waiter.attached();
      this.flush();
    } else if (record.type === "tick") {
      this.beatHeard();
      this.countSkippedTicks(record.ts);
      void this.countMissedRuns();
    } else if (record.type === "beat") {
      this.beatHeard();
      void this.countMissedRuns();
    } else if (record.type === "ack") {
      this.beatHeard();
      this.acks.get(record.seq)?.(true);
      this.acks.delete(record.seq);
      return;
    } else if (record.type === "adopted") {
      this.opts.metrics.probeAdoptedConnections.inc();
      return;
    } else if (record.type === "lost") {
      this.opts.metrics.probeEventsLost.inc(record.events);
    }
    if (this.recordListener(record, parsed.part, line)) this.opts.onLine?.(line);
  }

  /** The running instance attached: its compiler is paged out, and the next bpftrace may compile. */
  private compiled(): void {
    const endTurn = this.endTurn;
    this.endTurn = () => {};
    const pid = this.child?.pid;
    if (this.opts.compilerPages && pid !== undefined) void this.opts.compilerPages.attached(pid).finally(endTurn);
    else endTurn();
  }

  /** Adds what the kernel skipped of this instance's programs since the last tick (see missedRuns.ts). */
  private async countMissedRuns(): Promise<void> {
    const child = this.child;
    if (child?.pid === undefined || this.countingMisses) return;
    this.countingMisses = true;
    try {
      const total = await recursionMisses(child.pid);
      if (child !== this.child) return;
      if (total > this.missesCounted) this.opts.metrics.probeMissedRuns.inc({ program: this.opts.kind }, total - this.missesCounted);
      this.missesCounted = Math.max(this.missesCounted, total);
    } finally {
      this.countingMisses = false;
    }
  }

  private countSkippedTicks(ts: bigint): void {
    const skipped = this.lastTickNs === 0n ? 0 : skippedTicks(this.lastTickNs, ts);
    this.lastTickNs = ts;
    if (skipped > 0) this.opts.metrics.probeMissedRuns.inc({ program: this.opts.kind }, skipped);
  }

  private setUp(attached: boolean): void {
    if (this.opts.program) {
      this.opts.program.up(attached);
      return;
    }
    this.opts.metrics.probeUp.set(attached ? 1 : 0);
    this.opts.metrics.probeSendHook.set(attached && this.instanceSendHook ? 1 : 0);
  }

  private restarted(reason: ProbeRestartReason): void {
    if (this.opts.program) this.opts.program.restarted(reason);
    else this.opts.metrics.probeRestarts.inc({ reason });
  }

  private async checkHeartbeat(): Promise<void> {
    // A safety net for a change that made the send hook needed without a
    // message to the probe (a target's Go program gone with its process).
    this.attachSendHookIfNeeded();
    this.detachSendHookIfUnneeded();
    if (!this.ready || this.stopping || this.askingForBeat) return;
    if (Date.now() - this.lastBeat <= this.opts.heartbeatTimeoutMs) return;
    // Silent ticks do not make a dead program (see countSkippedTicks): where
    // another tool's BPF programs run long, the kernel skips them for seconds
    // on end while the program is well. So it is asked, in the agent's own
    // context, which the kernel does run it in; a restart would leave it blind
    // while the new one compiles, and forget every connection it knew.
    const child = this.child;
    this.askingForBeat = true;
    const silentMs = Date.now() - this.lastBeat;
    const answered = await this.askForBeat().finally(() => (this.askingForBeat = false));
    if (answered) {
      this.opts.log.warnRateLimited(`${this.name}-ticks-skipped`, "the kernel skipped bpftrace's ticks (another BPF program was running); it answers, so it runs on", {
        program: this.name,
        silentMs,
      });
      return;
    }
    if (child !== this.child || !this.ready || this.stopping) return;
    this.opts.log.warn("bpftrace stopped beating and does not answer; restarting", { program: this.name, silentMs: Date.now() - this.lastBeat });
    this.restarted("heartbeat_missed");
    if (child) {
      this.killedForSilence.add(child);
      child.kill("SIGKILL");
    }
  }

  /** A tick, a beat or an acknowledgement: the program runs and its output flows. */
  private beatHeard(): void {
    this.lastBeat = Date.now();
    this.beatListener?.();
  }

  /** True once the program answered (an acknowledgement from the socket probe, a `beat` line from another), asking up to ackAttempts times. */
  private async askForBeat(): Promise<boolean> {
    for (let attempt = 1; attempt <= this.opts.ackAttempts && this.ready; attempt++) {
      let timer: NodeJS.Timeout | undefined;
      const heard = new Promise<boolean>((resolve) => {
        this.beatListener = () => resolve(true);
        timer = setTimeout(() => resolve(false), this.opts.ackTimeoutMs);
      });
      try {
        if (this.opts.program) await this.opts.program.askForBeat();
        else await this.control.send(encodeControl(ControlOp.ack, BigInt(++this.seq)));
      } catch (err) {
        this.opts.log.warn("could not ask bpftrace whether it runs", { error: String(err) });
      }
      const answered = await heard;
      clearTimeout(timer);
      this.beatListener = null;
      if (answered) return true;
    }
    return false;
  }

  private onExit(child: ResultPromise, code: number | undefined, signal: string | null): void {
    this.exited.add(child);
    if (child.pid !== undefined) this.opts.compilerPages?.exited(child.pid);
    if (child !== this.child) return;
    this.endTurn();
    this.endTurn = () => {};
    this.ready = false;
    this.setUp(false);
    for (const resolve of this.acks.values()) resolve(false);
    this.acks.clear();
    if (this.stopping) return;
    if (this.stoppedForSendHook.has(child)) {
      // Counted as send_hook when stopped; started again at once.
      this.restartTimer = setTimeout(() => void this.respawn(), 0);
      return;
    }
    // A bpftrace the watchdog killed was counted as heartbeat_missed already.
    if (!this.killedForSilence.has(child)) this.restarted("exited");
    // An instance that attached and ran was healthy: something killed it (an
    // OOM kill, an operator's pkill), so it comes back at once; every second
    // blind is a second of lost writes nobody counts. Only instances that die
    // before attaching, or right after, are a crash loop worth backing off.
    const healthy = this.attachedAt > 0 && Date.now() - this.attachedAt >= this.opts.healthyRunMs;
    if (healthy) this.restarts = 0;
    const delay = restartDelayMs({ healthy, restarts: this.restarts, maxBackoffMs: this.opts.maxBackoffMs });
    if (!healthy) this.restarts++;
    this.opts.log.warn("bpftrace exited; restarting", { program: this.name, code, signal, inMs: Math.round(delay), afterHealthyRun: healthy });
    this.restartTimer = setTimeout(() => void this.respawn(), delay);
  }

  private async respawn(): Promise<void> {
    try {
      await this.launch();
    } catch (err) {
      this.restarted("spawn_failed");
      this.opts.log.warn("bpftrace could not be started", { error: String(err) });
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    for (const waiter of this.readyWaiters.splice(0)) waiter.stopped();
    clearInterval(this.watchdog);
    clearTimeout(this.restartTimer);
    const child = this.child;
    if (child && !this.exited.has(child)) {
      child.kill("SIGINT");
      const killer = setTimeout(() => child.kill("SIGKILL"), 3000);
      await child;
      clearTimeout(killer);
    }
    for (const message of this.pending.splice(0)) message.done();
    this.control.close();
    rmSync(this.workDir, { recursive: true, force: true });
  }
}
