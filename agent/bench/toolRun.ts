// The tools the bench sets beside the agent, each run as a user runs it:
// strace attached to the target, and bpftrace one-liners. A tool is ready
// once the kernel shows it attached (not when it says so), and stopped only
// once the kernel shows it gone, so that it cannot bleed into the next phase.
import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseEndpoint } from "../src/sources/probe/endpointKey.ts";
import { bpftraceEnv, renderProgram, REQUIRED_TRACEPOINTS } from "../src/sources/probe/probeProgram.ts";
import { sendHookNeed } from "../src/sources/probe/sendHook.ts";
import { renderTlsProgram } from "../src/sources/tls/tlsProbeProgram.ts";
import { cpuSeconds, liveComm, sleep } from "./agentRun.ts";

const READY_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 10_000;

/** A configuration's processes while its phase runs (the agent's run is one too). */
export interface ToolRun {
  /** The bpftrace processes it runs now: its own, not someone else's; their programs' run time is reported. */
  bpftrace(): number[];
  /** CPU seconds (user + system) used so far by its processes. */
  cpuSeconds(): number;
  /** Stops it; resolves once it is detached. */
  stop(): Promise<void>;
  /** The agent only: the target's sends its probe counted (its /metrics). */
  countedWrites?(): Promise<number>;
  /** The agent only: how often it restarted its bpftrace. */
  restarts?(): Promise<number>;
}

/**
 * Where the floor program attaches: the agent's send tracepoint. An empty
 * bpftrace program there (bpftrace 0.17 accepts the empty body) is what
 * attaching at all costs, in nanoseconds per send and in memory.
 */
export const FLOOR_TRACEPOINTS = ["sock:sock_send_length"];

/**
 * The syscall tracepoints a send hook would take on kernels without
 * sock_send_length (probes/apiserver_syscalls.bt uses these and their
 * entries): every file write of every process passes them too.
 */
export const SYSCALL_SEND_TRACEPOINTS = ["syscalls:sys_exit_sendto", "syscalls:sys_exit_sendmsg", "syscalls:sys_exit_write", "syscalls:sys_exit_writev"];

/** The BTF trampolines (fentry/fexit) on TCP's send: they fire on TCP sends only, not UDP, unix or file writes. */
export const KFUNC_SEND_PROBES = ["kfunc:tcp_sendmsg", "kretfunc:tcp_sendmsg"];

/** The least any send hook of the agent does: the one "is this pid a target" lookup (the target is in the map). */
export const LOOKUP_PREDICATE = "@targets[(uint64)pid]";

/** strace's arguments for attaching to `target`. */
export function straceArgs(target: number | string): string[] {
  return ["-f", "-qq", "-e", "trace=write", "-o", "/dev/null", "-p", String(target)];
}

/** A bpftrace program that runs `body` on each of `tracepoints` ("category:name"). */
export function oneLiner(tracepoints: string[], body: string): string {
  return `${tracepoints.map((t) => `tracepoint:${t}`).join(", ")} ${body ? `{ ${body} }` : "{ }"}`;
}

/**
 * An empty program on `probes` (full bpftrace probe names) behind the
 * minimal "is this pid a target" lookup, `targetPid` the map's one key: the
 * floor of any send hook that filters in the kernel.
 */
export function lookupProgram(probes: string[], targetPid: number | string): string {
  return `BEGIN { @targets[(uint64)${targetPid}] = 1; } ${probes.join(", ")} /${LOOKUP_PREDICATE}/ { }`;
}

/**
 * Whether this bpftrace can attach BTF trampolines (kfunc/kretfunc): null
 * if it can, else why not, in bpftrace's words. bpftrace 0.17 tries to load
 * a fentry program at start (`bpftrace --info`: "kfunc: yes/no"); a kernel
 * that refuses BPF_PROG_TYPE_TRACING programs makes it "no".
 */
export function kfuncUnavailable(): string | null {
  // bpftrace 0.17 prints its --info on stderr.
  const run = spawnSync("bpftrace", ["--info"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  const info = `${run.stdout ?? ""}${run.stderr ?? ""}`;
  const kfunc = /^\s*kfunc:\s*(\w+)/m.exec(info)?.[1];
  if (kfunc === "yes") return null;
  return kfunc === undefined ? "bpftrace --info does not say whether kfunc probes work" : `bpftrace --info: "kfunc: ${kfunc}" (bpftrace could not load a fentry program on this kernel)`;
}

/**
 * `strace -f -qq -e trace=write -o /dev/null -p TARGET`. It stops the target
 * at every syscall (ptrace has no kernel-side filter for an attached
 * process, so send()s pay as much as write()s) and touches no other process.
 * Attached when the target's TracerPid is strace; detached when it is 0.
 */
export async function startStrace(targetPid: number): Promise<ToolRun> {
  const { child, stderr } = spawnTool("strace", straceArgs(targetPid));
  const stop = async (): Promise<void> => {
    stopChild(child, "SIGINT");
    await waitFor(() => tracerPid(targetPid) === 0 && exited(child), STOP_TIMEOUT_MS, () => `strace did not detach from pid ${targetPid}`);
  };
  await waitFor(() => tracerPid(targetPid) === child.pid, READY_TIMEOUT_MS, () => `strace did not attach to pid ${targetPid}: ${stderr()}`, child, stop);
  return { bpftrace: () => [], cpuSeconds: () => cpuSeconds(child.pid!), stop };
}

/**
 * `bpftrace -e 'tracepoint:A, tracepoint:B { BODY }'` (see oneLiner) with its
 * output to /dev/null. Attached when bpftool lists each tracepoint for its pid.
 */
export async function startBpftrace(tracepoints: string[], body: string): Promise<ToolRun> {
  const program = oneLiner(tracepoints, body);
  return runBpftrace(["-e", program], tracepoints, `bpftrace -e '${program}'`);
}

/**
 * `bpftrace -e PROGRAM` on `probes` (kfunc:, tracepoint:, …), output to
 * /dev/null. Attached once bpftool shows each probe for its pid: a
 * tracepoint in `bpftool perf show`, a kfunc/kretfunc as a tracing program
 * of the pid in `bpftool prog show`.
 */
export async function startProgram(program: string, probes: string[]): Promise<ToolRun> {
  return runBpftrace(["-e", program], probes, `bpftrace -e '${program}'`);
}

/**
 * The agent's sockets program as the agent renders it for a target whose
 * requests its Go probe reads (marked request-level; see REQUEST-LEVEL
 * TARGETS in probes/apiserver_sockets.bt), run by bpftrace alone: the bench's
 * target is no Go binary, so the agent would not mark it itself. What a Go
 * operator's sends cost; the agent's user space does nothing per send.
 * `sendHook`: with the send probe, as a program started before the Go probe
 * followed the target keeps it; without, as the agent renders it when no
 * target needs it (sendHook.ts decides, as in the agent, for this state:
 * targets by pid only, every one followed).
 */
export async function startRequestLevelProbe(targetPid: number, apiserver: string, sendHook: boolean): Promise<ToolRun> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-bench-"));
  const file = path.join(dir, "sockets.bt");
  const state = { targets: [targetPid], requestLevel: [targetPid], endpoints: [parseEndpoint(apiserver)], execWatch: false };
  if (!sendHook && sendHookNeed(state).needed) throw new Error("the agent would keep the send hook for this state");
  writeFileSync(file, renderProgram("sockets", { ...state, sendHook }));
  const tracepoints = REQUIRED_TRACEPOINTS.sockets.map((t) => t.replace("/", ":")).filter((t) => sendHook || t !== "sock:sock_send_length");
  // AGENT_PID 0: no control channel, the state is all rendered.
  const run = await runBpftrace([file, "0", "0"], tracepoints, `bpftrace ${file}`, bpftraceEnv());
  return {
    ...run,
    stop: async () => {
      await run.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The system's libssl, which the TLS program of a python target would probe. */
const SYSTEM_LIBSSL = "/usr/lib/x86_64-linux-gnu/libssl.so.3";

/**
 * `first` and, beside it, the TLS program the agent runs for a target on
 * OpenSSL (agent/src/sources/tls/tlsProbeProgram.ts), on the system's libssl
 * and following the target: what a send pays while both run. The target's
 * loop calls no OpenSSL, so its uprobes never fire; the per-call cost of
 * those is not measured here.
 */
export async function withTlsProgram(first: ToolRun, targetPid: number): Promise<ToolRun> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-bench-tls-"));
  const file = path.join(dir, "tls.bt");
  writeFileSync(file, renderTlsProgram({ library: SYSTEM_LIBSSL, programId: 0, pids: [targetPid], execWatch: false }));
  let tls: ToolRun;
  try {
    tls = await runBpftrace([file, "0"], ["sock:sock_send_length", "sock:inet_sock_set_state"], `bpftrace ${file}`);
  } catch (error) {
    await first.stop();
    throw error;
  }
  return {
    bpftrace: () => [...first.bpftrace(), ...tls.bpftrace()],
    cpuSeconds: () => first.cpuSeconds() + tls.cpuSeconds(),
    stop: async () => {
      await tls.stop();
      await first.stop();
      rmSync(dir, { recursive: true, force: true });
    },
    ...(first.countedWrites ? { countedWrites: () => first.countedWrites!() } : {}),
    ...(first.restarts ? { restarts: () => first.restarts!() } : {}),
  };
}

async function runBpftrace(args: string[], tracepoints: string[], what: string, env: Record<string, string> = {}): Promise<ToolRun> {
  const { child, stderr } = spawnTool("bpftrace", args, env);
  const pid = child.pid!;
  const stop = async (): Promise<void> => {
    stopChild(child, "SIGINT");
    await waitFor(() => exited(child) && liveComm(pid) !== "bpftrace", STOP_TIMEOUT_MS, () => `bpftrace ${pid} did not exit`);
  };
  const trampolines = tracepoints.filter((t) => /^kr?func:/.test(t)).length;
  const names = tracepoints.filter((t) => !/^kr?func:/.test(t)).map((t) => t.slice(t.lastIndexOf(":") + 1));
  await waitFor(
    () => {
      const attached = attachedTracepoints(pid);
      return names.every((name) => attached.includes(name)) && (trampolines === 0 || tracingPrograms(pid) >= trampolines);
    },
    READY_TIMEOUT_MS,
    () => `${what} did not attach: ${stderr()}`,
    child,
    stop,
  );
  return { bpftrace: () => (liveComm(pid) === "bpftrace" ? [pid] : []), cpuSeconds: () => cpuSeconds(pid), stop };
}

/** The tracepoints `pid` has BPF programs attached to (bpftool perf show). */
function attachedTracepoints(pid: number): string[] {
  const listing = JSON.parse(execFileSync("bpftool", ["perf", "show", "-j"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] })) as { pid: number; tracepoint?: string }[];
  return listing.filter((entry) => entry.pid === pid && entry.tracepoint).map((entry) => entry.tracepoint!);
}

/** How many BPF tracing programs (fentry/fexit: kfunc, kretfunc) `pid` holds (bpftool prog show). */
function tracingPrograms(pid: number): number {
  const listing = JSON.parse(execFileSync("bpftool", ["prog", "show", "-j"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] })) as { type: string; pids?: { pid: number }[] }[];
  return listing.filter((prog) => prog.type === "tracing" && prog.pids?.some((p) => p.pid === pid)).length;
}

/** The pid tracing `pid` (ptrace), 0 for none. */
function tracerPid(pid: number): number {
  return Number(/^TracerPid:\s+(\d+)$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN);
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

function stopChild(child: ChildProcess, signal: NodeJS.Signals): void {
  if (exited(child)) return;
  child.kill(signal);
  setTimeout(() => exited(child) || child.kill("SIGKILL"), STOP_TIMEOUT_MS / 2).unref();
}

/** Starts `cmd` with stdout to /dev/null; `stderr()` is the last 2000 characters it wrote there. */
function spawnTool(cmd: string, args: string[], env: Record<string, string> = {}): { child: ChildProcess; stderr: () => string } {
  const child = spawn(cmd, args, { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, ...env } });
  child.once("error", () => undefined); // a failed start has no pid, thrown below
  if (child.pid === undefined) throw new Error(`could not start ${cmd}`);
  let text = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (text = (text + chunk).slice(-2000)));
  return { child, stderr: () => text.trim() };
}

/**
 * Polls `done` until it holds or `timeoutMs` passes. While starting, a child
 * that exits (or a timeout) stops what was started and fails with `why()`.
 */
async function waitFor(done: () => boolean, timeoutMs: number, why: () => string, starting?: ChildProcess, stop?: () => Promise<void>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if ((starting && exited(starting)) || Date.now() > deadline) {
      await stop?.().catch(() => undefined);
      throw new Error(why());
    }
    await sleep(50);
  }
}
