// What `lostwrite demo` installs on a fresh machine before it starts: the
// distribution's bpftrace and python3, and tracefs mounted. Only on Debian
// and Ubuntu (apt-get), only as root, only what is missing, each command said
// before it runs; `--no-install` refuses and prints the commands instead.
import { existsSync, readFileSync } from "node:fs";
import { execa } from "execa";

interface InstallStep {
  /** What is missing, in words. */
  why: string;
  /** The command, as it runs and as it is printed. */
  argv: string[];
}

export interface MachineState {
  root: boolean;
  /** apt-get present and the distribution is Debian or Ubuntu (or derived from one). */
  apt: boolean;
  bpftrace: boolean;
  python3: boolean;
  tracefs: boolean;
}

const TRACEFS = "/sys/kernel/tracing";

/** The commands that make the machine ready, in order; empty when nothing is missing. */
export function planInstall(state: MachineState): InstallStep[] {
  const steps: InstallStep[] = [];
  const packages = [...(state.bpftrace ? [] : ["bpftrace"]), ...(state.python3 ? [] : ["python3"])];
  if (packages.length > 0) {
    steps.push({ why: "the package lists are refreshed once", argv: ["apt-get", "update"] });
    steps.push({
      why: `${packages.join(" and ")} ${packages.length > 1 ? "are" : "is"} not installed`,
      argv: ["apt-get", "install", "-y", "--no-install-recommends", ...packages],
    });
  }
  if (!state.tracefs) steps.push({ why: "tracefs is not mounted", argv: ["mount", "-t", "tracefs", "nodev", TRACEFS] });
  return steps;
}

/** One command line to paste, for someone who is not root or refused the install. */
export function commandLine(step: InstallStep, sudo: boolean): string {
  return [...(sudo ? ["sudo"] : []), ...step.argv].join(" ");
}

export function isDebianLike(osRelease: string): boolean {
  const field = (name: string): string => new RegExp(`^${name}=("?)([^"\\n]*)\\1$`, "m").exec(osRelease)?.[2] ?? "";
  return [field("ID"), ...field("ID_LIKE").split(/\s+/)].some((id) => id === "debian" || id === "ubuntu");
}

async function onPath(command: string): Promise<boolean> {
  const result = await execa("sh", ["-c", `command -v ${command}`], { reject: false });
  return result.exitCode === 0;
}

export async function readMachineState(bpftrace = "bpftrace"): Promise<MachineState> {
  const osRelease = existsSync("/etc/os-release") ? readFileSync("/etc/os-release", "utf8") : "";
  return {
    root: process.getuid?.() === 0,
    apt: isDebianLike(osRelease) && (await onPath("apt-get")),
    bpftrace: await onPath(bpftrace),
    python3: await onPath("python3"),
    tracefs: ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"].some((dir) => existsSync(`${dir}/events`)),
  };
}

/** Runs each step, saying it first; stops at the first that fails, with its output. */
export async function runInstall(steps: readonly InstallStep[], print: (line: string) => void): Promise<{ ok: true } | { ok: false; reason: string }> {
  for (const step of steps) {
    print(`  ${step.why}: running ${commandLine(step, false)}`);
    const result = await execa(step.argv[0]!, step.argv.slice(1), {
      reject: false,
      all: true,
      env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
    });
    if (result.exitCode !== 0) {
      const tail = (result.all ?? "").trim().split("\n").slice(-3).join(" | ");
      return { ok: false, reason: `${commandLine(step, false)} exited ${result.exitCode}: ${tail}` };
    }
  }
  return { ok: true };
}
