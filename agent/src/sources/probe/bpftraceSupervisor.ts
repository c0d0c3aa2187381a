// Runs bpftrace and keeps it running: readiness waits for the program's
// `hello` (printed by BEGIN, i.e. after every probe attached); a bpftrace that
// exits or stops beating is restarted with backoff and jitter, re-rendered
// with the current state so a restart never forgets a target. bpftrace is
// started under `setpriv --pdeathsig KILL`, so the kernel kills it when the
// agent dies, even by SIGKILL: a killed agent leaves no probe behind.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { execa, type ResultPromise } from "execa";
import type { AgentMetrics } from "../../sinks/metrics.ts";
import { ControlChannel, ControlOp, encodeControl, endpointMessage } from "./controlChannel.ts";
import { kernelKeys, type EndpointKey } from "./endpointKey.ts";
import { parseProbeLine, type ProbeRecord } from "./probeOutput.ts";
import { renderProgram, type ProbeState, type ProbeVariant } from "./probeProgram.ts";

export interface Log {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
}

export interface SupervisorOptions {
  variant: ProbeVariant;
  bpftrace: string;
  metrics: AgentMetrics;
  log: Log;
  /** The current targets and endpoints, read at every (re)start. */
  state: () => ProbeState;
  onRecord: (record: ProbeRecord) => void;
  /** Every raw stdout line, before parsing (for `--record`). */
  onLine?: (line: string) => void;
  /** A new bpftrace instance started: its counters start at zero. */
  onInstance: () => void;
  heartbeatTimeoutMs?: number;
  readyTimeoutMs?: number;
  maxBackoffMs?: number;
}

const KNOWN_HARMLESS = /RLIMIT_MEMLOCK/;

export class BpftraceSupervisor {
  private readonly opts: Required<Omit<SupervisorOptions, "onLine">> & Pick<SupervisorOptions, "onLine">;
  private readonly control = new ControlChannel();
  private child: ResultPromise | undefined;
  private stopping = false;
  private lastBeat = 0;
  private restarts = 0;
  private watchdog: NodeJS.Timeout | undefined;
  private restartTimer: NodeJS.Timeout | undefined;
  private readonly workDir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-probe-"));
  private seq = 0;
  private readonly exited = new WeakSet<ResultPromise>();
  private readonly killedForSilence = new WeakSet<ResultPromise>();
  private startedAt = 0;
  private readonly acks = new Map<number, () => void>();
  private readyWaiters: (() => void)[] = [];
  ready = false;

  constructor(opts: SupervisorOptions) {
    this.opts = { heartbeatTimeoutMs: 5000, readyTimeoutMs: 60000, maxBackoffMs: 30000, ...opts };
  }

  async start(): Promise<void> {
    await this.control.open();
    this.spawn();
    await this.whenReady(this.opts.readyTimeoutMs);
    this.watchdog = setInterval(() => this.checkHeartbeat(), 1000);
  }

  whenReady(timeoutMs: number): Promise<void> {
    if (this.ready) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`bpftrace not attached after ${timeoutMs} ms`)), timeoutMs);
      this.readyWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** Applies a change in the kernel and resolves once the probe confirms it. */
  async addTarget(pid: number): Promise<void> {
    await this.sendConfirmed(encodeControl(ControlOp.addTarget, BigInt(pid)));
  }

  async removeTarget(pid: number): Promise<void> {
    await this.sendConfirmed(encodeControl(ControlOp.removeTarget, BigInt(pid)));
  }

  async forgetCounters(pid: number): Promise<void> {
    await this.sendConfirmed(encodeControl(ControlOp.forgetCounters, BigInt(pid)));
  }

  async setEndpoint(endpoint: EndpointKey, present: boolean): Promise<void> {
    await this.sendConfirmed(kernelKeys(endpoint).flatMap((key) => endpointMessage(present, key)));
  }

  private async sendConfirmed(lengths: number[]): Promise<void> {
    // Not attached: nothing to tell; the next start renders the current state.
    if (!this.ready) return;
    const seq = ++this.seq;
    const acked = new Promise<void>((resolve) => this.acks.set(seq, resolve));
    await this.control.send([...lengths, ...encodeControl(ControlOp.ack, BigInt(seq))]);
    const timeout = new Promise<void>((resolve) =>
      setTimeout(() => {
        if (this.acks.delete(seq)) this.opts.log.warn("probe did not acknowledge a control message", { seq });
        resolve();
      }, 3000).unref(),
    );
    await Promise.race([acked, timeout]);
  }

  private spawn(): void {
    const program = renderProgram(this.opts.variant, this.opts.state());
    const file = path.join(this.workDir, "program.bt");
    writeFileSync(file, program);
    const args = ["--pdeathsig", "KILL", this.opts.bpftrace, "-f", "json", file, String(process.pid), String(this.control.port)];
    const child = execa("setpriv", args, {
      buffer: false,
      reject: false,
      stdin: "ignore",
      env: { BPFTRACE_MAP_KEYS_MAX: "16384" },
    });
    this.child = child;
    this.lastBeat = Date.now();
    this.startedAt = Date.now();
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
    this.opts.onLine?.(line);
    const parsed = parseProbeLine(line);
    if (!parsed.ok) {
      this.opts.metrics.probeParseErrors.inc();
      this.opts.log.warn("unparsable probe output", { error: parsed.error });
      return;
    }
    const record = parsed.record;
    if (record.type === "hello") {
      this.lastBeat = Date.now();
      this.ready = true;
      this.opts.metrics.probeUp.set(1);
      for (const waiter of this.readyWaiters.splice(0)) waiter();
    } else if (record.type === "tick") {
      this.lastBeat = Date.now();
    } else if (record.type === "ack") {
      this.acks.get(record.seq)?.();
      this.acks.delete(record.seq);
      return;
    } else if (record.type === "lost") {
      this.opts.metrics.probeEventsLost.inc(record.events);
    }
    this.opts.onRecord(record);
  }

  private checkHeartbeat(): void {
    if (!this.ready || this.stopping) return;
    // A minute of healthy running resets the backoff.
    if (Date.now() - this.startedAt > 60000) this.restarts = 0;
    if (Date.now() - this.lastBeat > this.opts.heartbeatTimeoutMs) {
      this.opts.log.warn("bpftrace stopped beating; restarting", { silentMs: Date.now() - this.lastBeat });
      this.opts.metrics.probeRestarts.inc({ reason: "heartbeat_missed" });
      if (this.child) {
        this.killedForSilence.add(this.child);
        this.child.kill("SIGKILL");
      }
    }
  }

  private onExit(child: ResultPromise, code: number | undefined, signal: string | null): void {
    this.exited.add(child);
    if (child !== this.child) return;
    this.ready = false;
    this.opts.metrics.probeUp.set(0);
    for (const resolve of this.acks.values()) resolve();
    this.acks.clear();
    if (this.stopping) return;
    // A bpftrace the watchdog killed was counted as heartbeat_missed already.
    if (!this.killedForSilence.has(child)) this.opts.metrics.probeRestarts.inc({ reason: "exited" });
    const backoff = Math.min(this.opts.maxBackoffMs, 1000 * 2 ** Math.min(this.restarts, 5));
    const delay = backoff / 2 + Math.random() * (backoff / 2);
    this.restarts++;
    this.opts.log.warn("bpftrace exited; restarting", { code, signal, inMs: Math.round(delay) });
    this.restartTimer = setTimeout(() => {
      try {
        this.spawn();
      } catch (err) {
        this.opts.metrics.probeRestarts.inc({ reason: "spawn_failed" });
        this.opts.log.warn("bpftrace could not be started", { error: String(err) });
      }
    }, delay);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    clearInterval(this.watchdog);
    clearTimeout(this.restartTimer);
    const child = this.child;
    if (child && !this.exited.has(child)) {
      child.kill("SIGINT");
      const killer = setTimeout(() => child.kill("SIGKILL"), 3000);
      await child;
      clearTimeout(killer);
    }
    this.control.close();
    rmSync(this.workDir, { recursive: true, force: true });
  }
}
