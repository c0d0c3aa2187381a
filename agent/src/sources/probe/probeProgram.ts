// Chooses the probe program for the running kernel and renders it with the
// initial targets and apiserver endpoints, so a fresh bpftrace is complete
// from its first event; later changes go through the control channel.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { z } from "zod";
import { childEnv, scriptBeside } from "../../childScript.ts";
import { dirAbove } from "../../installPaths.ts";
import { kernelKeys, type EndpointKey } from "./endpointKey.ts";
import { initialPids } from "./followedPids.ts";

export type ProbeVariant = "sockets" | "syscalls";
export const PROBE_VARIANTS = ["sockets", "syscalls"] as const;

export interface ProbeState {
  targets: Iterable<number>;
  /** Targets whose requests the Go probe reads: the socket probe leaves their successful sends alone. */
  requestLevel?: Iterable<number>;
  endpoints: Iterable<EndpointKey>;
  /** Rules can match a program that starts later: trace every exec until user space decides. */
  execWatch?: boolean;
  /** --send-hook rules: while execWatch is on, the send hook is needed (sendHook.ts); default true. */
  sendHookForRules?: boolean;
  /** --unanswered-min-bytes: a close leaving this much unanswered is a loss, and later failed sends on its socket fold into it. */
  unansweredMinBytes?: number;
  /** false: the sockets program without its send probe (sendHook.ts says when); the syscalls variant has none to leave out. */
  sendHook?: boolean;
}

export const TRACEFS_ROOTS = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/** The tracepoints a variant needs; `lostwrite doctor` reports the missing ones. */
export const REQUIRED_TRACEPOINTS: Record<ProbeVariant, string[]> = {
  sockets: [
    "sock/sock_send_length",
    "sock/inet_sock_set_state",
    "tcp/tcp_receive_reset",
    "tcp/tcp_retransmit_skb",
    "tcp/tcp_destroy_sock",
    "sched/sched_process_exec",
    "sched/sched_process_exit",
  ],
  syscalls: [
    "syscalls/sys_enter_write",
    "syscalls/sys_exit_write",
    "syscalls/sys_enter_writev",
    "syscalls/sys_exit_writev",
    "syscalls/sys_enter_sendto",
    "syscalls/sys_exit_sendto",
    "syscalls/sys_enter_sendmsg",
    "syscalls/sys_exit_sendmsg",
    "syscalls/sys_enter_connect",
    "syscalls/sys_exit_connect",
    "sock/inet_sock_set_state",
    "tcp/tcp_rcv_space_adjust",
    "tcp/tcp_receive_reset",
    "tcp/tcp_retransmit_skb",
    "tcp/tcp_destroy_sock",
    "sched/sched_process_exec",
    "sched/sched_process_exit",
  ],
};

const PROGRAM_FILES: Record<ProbeVariant, string> = {
  sockets: "apiserver_sockets.bt",
  syscalls: "apiserver_syscalls.bt",
};

export function tracepointAvailable(name: string, roots = TRACEFS_ROOTS): boolean {
  return roots.some((root) => existsSync(path.join(root, "events", name)));
}

/**
 * sock:sock_send_length (Linux >= 6.3) lets the probe see every socket send
 * without a syscall tracepoint; the syscall tracepoints of the fallback slow
 * every file write of every process on the node by 2-4x, so they are used
 * only on kernels that lack the socket tracepoints.
 */
export function chooseVariant(available = tracepointAvailable): ProbeVariant {
  for (const variant of PROBE_VARIANTS) {
    if (REQUIRED_TRACEPOINTS[variant].every((tp) => available(tp))) return variant;
  }
  const missing = REQUIRED_TRACEPOINTS.syscalls.filter((tp) => !available(tp));
  throw new Error(`kernel lacks tracepoints ${missing.join(", ")} (is tracefs mounted?); run "lostwrite doctor"`);
}

function probesDir(): string {
  const root = dirAbove("probes/apiserver_sockets.bt");
  if (root === null) throw new Error("probe programs not found: expected a probes/ folder above the agent");
  return path.join(root, "probes");
}

/**
 * A program template's sections under probes/ (`// @name` lines start
 * them), its header comment and every comment line left out; each of
 * `required` must be there. Read at each render: a template is rendered once
 * per probed file and restart.
 */
export function templateSections<Name extends string>(template: string, required: readonly Name[]): Record<Name, string[]> {
  const file = path.join(probesDir(), template);
  const body = readFileSync(file, "utf8").replace(/^\/\*[\s\S]*?\*\/\n/, "");
  const found: Record<string, string[]> = {};
  let current: string[] | null = null;
  for (const line of body.split("\n")) {
    const marker = /^\/\/ @([A-Za-z-]+)$/.exec(line);
    if (marker) found[marker[1]!] = current = [];
    else if (!/^\s*\/\//.test(line)) current?.push(line);
  }
  for (const name of required) if (!found[name]) throw new Error(`${file} lacks its "// @${name}" section`);
  return found;
}

function programPath(variant: ProbeVariant): string {
  return path.join(probesDir(), PROGRAM_FILES[variant]);
}

const KERNEL_BTF = "/sys/kernel/btf/vmlinux";

/**
 * The environment every bpftrace of the agent runs with. BPFTRACE_BTF names
 * a BTF file: left to itself, bpftrace 0.17 finds BTF by walking the kernel's
 * BTF objects by id, which needs CAP_SYS_ADMIN, and with only the
 * DaemonSet's capabilities it then knows no kernel struct ("Unknown
 * struct/union: 'struct tcp_sock'"). Reading a file needs no privilege. The
 * file is the kernel's BTF cut to what the programs read (kernelBtf()).
 *
 * BPFTRACE_MAP_KEYS_MAX sizes every map of a program alike (bpftrace 0.17
 * has no per-map size), and the kernel allocates each hash map whole at load,
 * per CPU for counting maps, in kernel memory outside bpftrace's RSS that the
 * pod's cgroup is charged for: at 16384 keys the socket probe held 34 MiB of
 * maps on 2 CPUs, and its five per-CPU maps grow with the CPU count (12 MiB
 * each on 96 CPUs). What the maps hold is small: per target pid, per
 * apiserver socket of a target, per dead socket until it is freed, per
 * in-flight Go stream; the most is exec'd processes not yet decided, which the
 * agent removes within milliseconds. 4096 keys leave room for thousands of
 * each and cut the maps to a quarter.
 */
const MAP_KEYS_MAX = 4096;

export function bpftraceEnv(): Record<string, string> {
  const { file } = kernelBtf();
  return { BPFTRACE_MAP_KEYS_MAX: String(MAP_KEYS_MAX), ...(file !== null ? { BPFTRACE_BTF: file } : {}) };
}

/** The BTF file bpftrace is given, and what became of the cut. */
interface KernelBtf {
  /** null when the kernel has no BTF file. */
  file: string | null;
  /** Sizes of the kernel's BTF and of the cut (null when not cut). */
  kernelBytes: number | null;
  cutBytes: number | null;
  /** Why the kernel's whole BTF is given instead of the cut; null when cut. */
  error: string | null;
  /** The byte offsets of the kernel fields the programs take (`offsetof(struct S, F)`, kernelBtf.ts), by "S.F"; a string: why there are none. */
  offsets: Readonly<Record<string, number>> | string;
}

/** What the cut's process prints. */
const CUT_ANSWER = z.union([z.object({ offsets: z.record(z.string(), z.number().int().nonnegative()) }), z.object({ offsetsError: z.string() })]);

let kernelBtfMade: KernelBtf | undefined;

const BTF_CUT_SCRIPT = scriptBeside(import.meta.url, "kernelBtfChild");
/** It takes 0.2 s here; a cut still running after this is stuck. */
const BTF_CUT_TIMEOUT_MS = 30_000;

/**
 * The kernel's BTF cut to what the programs under probes/ read
 * (kernelBtf.ts: each bpftrace that reads kernel types then holds some 17
 * MiB less), made at the first call by a process of its own
 * (kernelBtfChild.ts) into a directory of this process's, removed at its
 * exit. Should the cut fail, bpftrace is given the kernel's whole file.
 */
export function kernelBtf(): KernelBtf {
  kernelBtfMade ??= cutKernelBtf();
  return kernelBtfMade;
}

function cutKernelBtf(): KernelBtf {
  if (!existsSync(KERNEL_BTF)) {
    const error = `${KERNEL_BTF} does not exist`;
    return { file: null, kernelBytes: null, cutBytes: null, error, offsets: `the kernel's field offsets are read from its BTF: ${error}` };
  }
  let kernelBytes: number | null = null;
  try {
    kernelBytes = statSync(KERNEL_BTF).size;
    const dir = probesDir();
    const programs = readdirSync(dir)
      .filter((name) => name.endsWith(".bt"))
      .map((name) => path.join(dir, name));
    const out = mkdtempSync(path.join(os.tmpdir(), "lostwrite-btf-"));
    process.once("exit", () => rmSync(out, { recursive: true, force: true }));
    const file = path.join(out, "kernel.btf");
    // Once, at start, before any bpftrace: the wait is the child's 0.2 s.
    const child = spawnSync(process.execPath, [BTF_CUT_SCRIPT, KERNEL_BTF, file, ...programs], { encoding: "utf8", timeout: BTF_CUT_TIMEOUT_MS, env: childEnv() });
    if (child.status !== 0) {
      const why = child.error?.message ?? (child.signal !== null ? `killed by ${child.signal}` : `exit code ${child.status}`);
      throw new Error(`the cut's process failed (${why}): ${child.stderr.trim().slice(-2048)}`);
    }
    const answer = CUT_ANSWER.parse(JSON.parse(child.stdout));
    const offsets = "offsets" in answer ? answer.offsets : `the kernel's field offsets: ${answer.offsetsError}`;
    return { file, kernelBytes, cutBytes: statSync(file).size, error: null, offsets };
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    return { file: KERNEL_BTF, kernelBytes, cutBytes: null, error: why, offsets: `the kernel's field offsets are read by the BTF cut's process, which failed: ${why}` };
  }
}

const MARKER = "// @initial-state";

/**
 * A program's MISSED CLOSE block (see the .bt header) is written once, in its
 * tcp_destroy_sock probe, between these lines; a probe that also needs it (the
 * sockets variant's failed send) holds a `// @missed-close` line, which is
 * replaced by a copy indented to its depth. bpftrace 0.17 has no functions.
 */
const MISSED_CLOSE = { begin: "// @missed-close begin", end: "// @missed-close end", copy: /^(\t*)\/\/ @missed-close$/m };

/** `source` with each `// @missed-close` line replaced by the block, re-indented. */
export function copyMissedClose(source: string, file: string): string {
  const begin = source.indexOf(MISSED_CLOSE.begin);
  const end = source.indexOf(MISSED_CLOSE.end);
  if (begin < 0 || end < begin) throw new Error(`${file} lacks the "${MISSED_CLOSE.begin}" … "${MISSED_CLOSE.end}" block`);
  const block = source.slice(source.lastIndexOf("\n", begin) + 1, source.indexOf("\n", end)).split("\n");
  const depth = /^\t*/.exec(block[0]!)![0].length;
  let text = source;
  for (let match = MISSED_CLOSE.copy.exec(text); match; match = MISSED_CLOSE.copy.exec(text)) {
    const indent = match[1]!;
    const copy = block.map((line) => (line.length === 0 ? line : indent + line.slice(depth))).join("\n");
    text = text.slice(0, match.index) + copy + text.slice(match.index + match[0].length);
  }
  return text;
}

/** The sockets program's send probe stands between lines starting so (see THE SEND HOOK in its header). */
const SEND_HOOK = { begin: /^\/\/ @send-hook begin/m, end: /^\/\/ @send-hook end$/m };

/** `source` without the lines from SEND_HOOK.begin to SEND_HOOK.end, both included. */
function withoutSendHook(source: string, file: string): string {
  const begin = SEND_HOOK.begin.exec(source)?.index ?? -1;
  const end = SEND_HOOK.end.exec(source)?.index ?? -1;
  if (begin < 0 || end < begin) throw new Error(`${file} lacks the "// @send-hook begin" … "// @send-hook end" lines`);
  return source.slice(0, begin) + source.slice(source.indexOf("\n", end) + 1);
}

export function renderProgram(variant: ProbeVariant, state: ProbeState): string {
  const file = programPath(variant);
  const template = readFileSync(file, "utf8");
  const source = copyMissedClose(variant === "sockets" && state.sendHook === false ? withoutSendHook(template, file) : template, file);
  if (!source.includes(MARKER)) throw new Error(`${file} lacks the "${MARKER}" line`);
  const lines: string[] = [];
  if (state.execWatch) lines.push("@exec_watch = 1;");
  if (state.unansweredMinBytes !== undefined) lines.push(`@unanswered_min = (uint64)${state.unansweredMinBytes};`);
  const requestLevel = new Set(state.requestLevel ?? []);
  for (const pid of initialPids(state.targets)) lines.push(`@targets[(uint64)${pid}] = ${requestLevel.has(pid) ? 2 : 1};`);
  for (const endpoint of state.endpoints) {
    for (const key of kernelKeys(endpoint)) {
      lines.push(
        key.family === 4
          ? `@api4[(uint64)${key.addr}, (uint64)${key.port}] = 1; // ${key.text}`
          : `@api6[(uint64)${key.hi}, (uint64)${key.lo}, (uint64)${key.port}] = 1; // ${key.text}`,
      );
    }
  }
  return source.replace(MARKER, lines.length ? lines.join("\n\t") : "// (no initial state)");
}
