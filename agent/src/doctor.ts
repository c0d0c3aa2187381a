// `lostwrite doctor`: checks what the probe needs on this node and says what
// to do about each missing piece. Exit code 0 when the agent can run.
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { execa } from "execa";
import { REQUIRED_TRACEPOINTS, chooseVariant, tracepointAvailable } from "./sources/probe/probeProgram.ts";

interface Check {
  name: string;
  ok: boolean;
  detail: string;
  fix?: string;
}

// Capability bits (linux/capability.h) the probe needs.
const CAPS: Record<string, number> = { CAP_SYS_ADMIN: 21, CAP_SYS_PTRACE: 19, CAP_DAC_READ_SEARCH: 2, CAP_PERFMON: 38, CAP_BPF: 39 };

function effectiveCaps(): bigint | null {
  const line = readFileSync("/proc/self/status", "utf8").split("\n").find((l) => l.startsWith("CapEff:"));
  return line ? BigInt(`0x${line.split(/\s+/)[1]}`) : null;
}

export async function collectChecks(bpftrace: string): Promise<Check[]> {
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
      ...(has("CAP_SYS_PTRACE") ? {} : { fix: "grant CAP_SYS_PTRACE so /proc/<pid>/status and cgroup of other users' processes are readable" }),
    });
  }
  const cgroup2 = existsSync("/sys/fs/cgroup/cgroup.controllers");
  checks.push({
    name: "cgroup layout",
    ok: cgroup2 || existsSync("/sys/fs/cgroup"),
    detail: cgroup2 ? "cgroup v2 (unified)" : existsSync("/sys/fs/cgroup") ? `cgroup v1 (${readdirSync("/sys/fs/cgroup").length} hierarchies)` : "no /sys/fs/cgroup",
    ...(existsSync("/sys/fs/cgroup") ? {} : { fix: "mount the host's /sys/fs/cgroup (needed to map containers to pids)" }),
  });
  return checks;
}

export async function runDoctor(opts: { bpftrace: string; out: NodeJS.WritableStream }): Promise<number> {
  const checks = await collectChecks(opts.bpftrace);
  for (const check of checks) {
    opts.out.write(`${check.ok ? "ok  " : "FAIL"}  ${check.name}: ${check.detail}\n`);
    if (!check.ok && check.fix) opts.out.write(`      fix: ${check.fix}\n`);
  }
  // The socket variant missing is not fatal when the fallback works.
  const fatal = checks.filter((c) => !c.ok && c.name !== "tracepoints (sockets)" && c.name !== "tracepoints (syscalls)");
  return fatal.length ? 1 : 0;
}
