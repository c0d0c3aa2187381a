// `lostwrite doctor`: checks what the probe needs on this node and says what
// to do about each missing piece. Exit code 0 when the agent can run.
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { execa } from "execa";
import { REQUIRED_TRACEPOINTS, bpftraceEnv, chooseVariant, tracepointAvailable } from "./sources/probe/probeProgram.ts";
import { TLS_TRACEPOINT } from "./sources/tls/tlsProbeProgram.ts";
import { pageoutHelper } from "./sources/probe/compilerPages.ts";
import { readAgentIdentity } from "./sources/targets/agentIdentity.ts";
import { parseCgroupFile } from "./sources/targets/cgroup.ts";

interface Check {
  name: string;
  ok: boolean;
  detail: string;
  fix?: string;
}

// Capability bits (linux/capability.h) the probe needs.
const CAPS: Record<string, number> = { CAP_SYS_ADMIN: 21, CAP_SYS_PTRACE: 19, CAP_DAC_READ_SEARCH: 2, CAP_PERFMON: 38, CAP_BPF: 39, CAP_SYS_NICE: 23 };
/** Checks whose failure costs memory or one kind of answer, not the agent's work. */
const NOT_FATAL = new Set(["tracepoints (sockets)", "tracepoints (syscalls)", "TLS answers", "compiler page-out"]);

function effectiveCaps(): bigint | null {
  const line = readFileSync("/proc/self/status", "utf8").split("\n").find((l) => l.startsWith("CapEff:"));
  return line ? BigInt(`0x${line.split(/\s+/)[1]}`) : null;
}

function readOr(file: string, fallback: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return fallback;
  }
}

/**
 * The proc root must be the host's: operators run in other PID namespaces, and
 * only the host's /proc lists them under the pids bpftrace reports. Kernel
 * threads are visible in the initial PID namespace only, so pid 2 being
 * kthreadd tells the host's /proc from a pod's own.
 */
function hostProcChecks(procRoot: string): Check[] {
  const fix = `mount the host's /proc (hostPath /proc, e.g. at /host/proc) and set --proc-root (LOSTWRITE_PROC_ROOT) to it`;
  const kthreadd = readOr(path.join(procRoot, "2", "comm"), "").trim() === "kthreadd";
  const checks: Check[] = [
    kthreadd
      ? { name: "host /proc", ok: true, detail: `${procRoot} is the host's (pid 2 is kthreadd)` }
      : { name: "host /proc", ok: false, detail: `${procRoot} is not the host's /proc (no kthreadd at pid 2): other pods' processes are invisible`, fix },
  ];
  try {
    const self = readAgentIdentity(procRoot);
    const ownNamespace = self.hostPid !== process.pid;
    checks.push({
      name: "agent pid",
      ok: true,
      detail: ownNamespace
        ? `own PID namespace: pid ${process.pid} here is host pid ${self.hostPid}, which the probe's control channel uses`
        : `host PID namespace: pid ${self.hostPid}`,
    });
  } catch (err) {
    checks.push({ name: "agent pid", ok: false, detail: (err as Error).message, fix });
  }
  // How the agent maps processes to containers: their cgroup file, as the host shows it.
  const lines = parseCgroupFile(readOr(path.join(procRoot, "self", "cgroup"), ""));
  const v2Only = lines.length === 1 && lines[0]!.hierarchy === 0;
  checks.push(
    lines.length
      ? { name: "cgroup layout", ok: true, detail: v2Only ? "cgroup v2 (unified)" : `cgroup v1 or hybrid (${lines.length} hierarchies)` }
      : { name: "cgroup layout", ok: false, detail: `${procRoot}/self/cgroup unreadable`, fix },
  );
  return checks;
}

/**
 * Whether bpftrace really loads and attaches a tracepoint program with the
 * privileges this process has: capability bits can look right and still be
 * refused (a seccomp profile, a LSM, perf_event_paranoid, a read-only tracefs).
 */
async function attachCheck(bpftrace: string): Promise<Check> {
  // A kernel struct read through BTF, as the probes do, and the tracepoints they use.
  const program =
    "tracepoint:sock:inet_sock_set_state { $s = (struct tcp_sock *)args->skaddr; @rcvd = $s->bytes_received; } " +
    "tracepoint:sched:sched_process_exec { } BEGIN { exit(); }";
  try {
    const result = await execa(bpftrace, ["-e", program], { reject: false, timeout: 60_000, all: true, env: bpftraceEnv() });
    if (result.exitCode === 0) return { name: "bpftrace attaches", ok: true, detail: "a program reading struct tcp_sock through BTF loaded and attached" };
    const why = (result.all ?? "").split("\n").filter((l) => l.trim() && !/RLIMIT_MEMLOCK/.test(l)).slice(-2).join(" | ");
    return { name: "bpftrace attaches", ok: false, detail: why || `exit code ${result.exitCode}`, fix: "grant CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE, and mount the host's tracefs" };
  } catch (err) {
    return { name: "bpftrace attaches", ok: false, detail: (err as Error).message, fix: "apt-get install bpftrace" };
  }
}

export async function collectChecks(bpftrace: string, procRoot = "/proc"): Promise<Check[]> {
  const checks: Check[] = [];
  const tracefs = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"].find((dir) => existsSync(`${dir}/events`));
  checks.push(
    tracefs
      ? { name: "tracefs", ok: true, detail: `mounted at ${tracefs}` }
      : {
          name: "tracefs",
          ok: false,
          detail: "not mounted",
          fix: "mount -t tracefs nodev /sys/kernel/tracing (in a pod: mount the host's /sys/kernel/tracing)",
        },
  );
  const btf = existsSync("/sys/kernel/btf/vmlinux");
  checks.push(
    btf
      ? { name: "BTF", ok: true, detail: "/sys/kernel/btf/vmlinux present" }
      : { name: "BTF", ok: false, detail: "no /sys/kernel/btf/vmlinux", fix: "use a kernel built with CONFIG_DEBUG_INFO_BTF=y (the probe reads struct sock through BTF)" },
  );
  try {
    const { stdout } = await execa(bpftrace, ["--version"]);
    const version = /v?(\d+)\.(\d+)\.(\d+)/.exec(stdout);
    const ok = version !== null && (Number(version[1]) > 0 || Number(version[2]) >= 17);
    checks.push({ name: "bpftrace", ok, detail: stdout.trim(), ...(ok ? {} : { fix: "install bpftrace >= 0.17" }) });
  } catch {
    checks.push({ name: "bpftrace", ok: false, detail: `"${bpftrace}" not found or not runnable`, fix: "apt-get install bpftrace" });
  }
  for (const [variant, tracepoints] of Object.entries(REQUIRED_TRACEPOINTS)) {
    const missing = tracepoints.filter((tp) => !tracepointAvailable(tp));
    checks.push({
      name: `tracepoints (${variant})`,
      ok: missing.length === 0,
      detail: missing.length ? `missing ${missing.join(", ")}` : `all ${tracepoints.length} present`,
      ...(missing.length
        ? { fix: variant === "sockets" ? "Linux >= 6.3 has them; the agent falls back to the syscalls variant" : "enable CONFIG_FTRACE_SYSCALLS" }
        : {}),
    });
  }
  const tlsAnswers = tracepointAvailable(TLS_TRACEPOINT);
  checks.push({
    name: "TLS answers",
    ok: tlsAnswers,
    detail: tlsAnswers
      ? `${TLS_TRACEPOINT} present: OpenSSL clients' connections are judged by what SSL_read returned`
      : `no ${TLS_TRACEPOINT}: the TLS program cannot tie an SSL object to its socket; OpenSSL clients are judged on the socket path`,
    ...(tlsAnswers ? {} : { fix: "Linux >= 6.3 has it" }),
  });
  try {
    checks.push({ name: "probe variant", ok: true, detail: `the agent will load "${chooseVariant()}"` });
  } catch (err) {
    checks.push({ name: "probe variant", ok: false, detail: (err as Error).message, fix: "see the tracepoint checks above" });
  }
  const caps = effectiveCaps();
  if (caps !== null) {
    const has = (name: string): boolean => ((caps >> BigInt(CAPS[name]!)) & 1n) === 1n;
    const bpfOk = has("CAP_SYS_ADMIN") || (has("CAP_BPF") && has("CAP_PERFMON"));
    checks.push({
      name: "capabilities",
      ok: bpfOk,
      detail: Object.keys(CAPS).filter(has).join(", ") || "none",
      ...(bpfOk ? {} : { fix: "grant CAP_BPF and CAP_PERFMON (kernel >= 5.8) or run as root" }),
    });
    checks.push({
      name: "capabilities (/proc of other processes)",
      ok: has("CAP_SYS_PTRACE") || has("CAP_SYS_ADMIN"),
      detail: has("CAP_SYS_PTRACE") ? "CAP_SYS_PTRACE present" : "CAP_SYS_PTRACE missing",
      // status, cgroup and comm are world-readable; exe is not (ptrace read access).
      ...(has("CAP_SYS_PTRACE")
        ? {}
        : { fix: "grant CAP_SYS_PTRACE so /proc/<pid>/exe of operators running as other users opens: without it their Go requests are not followed, only their sockets" }),
    });
    const helper = pageoutHelper();
    const pageOut = helper !== null && has("CAP_SYS_NICE");
    checks.push({
      name: "compiler page-out",
      ok: pageOut,
      detail: pageOut ? `${helper} and CAP_SYS_NICE present` : helper === null ? "the page-out helper is not built" : "CAP_SYS_NICE missing",
      ...(pageOut
        ? {}
        : { fix: `${helper === null ? "build it (npm run build:pageout)" : "grant CAP_SYS_NICE"}: without it each bpftrace keeps its compiler resident (about 50 MiB more each); nothing else changes` }),
    });
  }
  checks.push(await attachCheck(bpftrace));
  checks.push(...hostProcChecks(procRoot));
  return checks;
}

export async function runDoctor(opts: { bpftrace: string; procRoot: string; out: NodeJS.WritableStream }): Promise<number> {
  const checks = await collectChecks(opts.bpftrace, opts.procRoot);
  for (const check of checks) {
    opts.out.write(`${check.ok ? "ok  " : "FAIL"}  ${check.name}: ${check.detail}\n`);
    if (!check.ok && check.fix) opts.out.write(`      fix: ${check.fix}\n`);
  }
  // The socket variant missing is not fatal when the fallback works, nor are TLS answers or page-out.
  const fatal = checks.filter((c) => !c.ok && !NOT_FATAL.has(c.name));
  return fatal.length ? 1 : 0;
}
