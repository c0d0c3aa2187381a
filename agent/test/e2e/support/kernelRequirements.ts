// What a real-kernel e2e test needs: root (bpftrace loads BPF programs),
// bpftrace and bpftool on PATH, tracefs mounted. Elsewhere such a test skips with the
// reason; under CI=true it fails with it, so CI never passes by skipping.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { goUnavailable } from "../../../../testbed/goBuild.ts";

export function missingKernelRequirements(): string[] {
  const missing: string[] = [];
  if (process.getuid?.() !== 0) missing.push("not root (bpftrace needs root or CAP_BPF+CAP_PERFMON)");
  try {
    execFileSync("bpftrace", ["--version"], { stdio: "ignore" });
  } catch {
    missing.push("bpftrace not on PATH (apt-get install bpftrace)");
  }
  try {
    execFileSync("bpftool", ["version"], { stdio: "ignore" });
  } catch {
    missing.push("bpftool not on PATH (apt-get install bpftool: tests read the probe's maps in the kernel)");
  }
  if (!existsSync("/sys/kernel/tracing/events")) missing.push("tracefs not mounted (mount -t tracefs nodev /sys/kernel/tracing)");
  if (!existsSync("/usr/bin/python3") && !existsSync("/usr/local/bin/python3")) {
    try {
      execFileSync("python3", ["--version"], { stdio: "ignore" });
    } catch {
      missing.push("python3 not on PATH (the test clients are python3 programs)");
    }
  }
  return missing;
}

/** node:test `skip` value: the reason, or false under CI=true (then `assertKernelRequirements` fails). */
export function skipWithoutKernel(): string | false {
  const missing = missingKernelRequirements();
  if (missing.length === 0 || process.env.CI === "true") return false;
  return missing.join("; ");
}

/** The same for tests that also build Go programs: without Go they skip, except under CI=true (then they fail). */
export function skipWithoutKernelOrGo(): string | false {
  const kernel = skipWithoutKernel();
  if (kernel) return kernel;
  const go = goUnavailable();
  return go !== null && process.env.CI !== "true" ? go : false;
}

export function assertKernelRequirements(): void {
  const missing = missingKernelRequirements();
  if (missing.length) throw new Error(`e2e test cannot run: ${missing.join("; ")}`);
}
