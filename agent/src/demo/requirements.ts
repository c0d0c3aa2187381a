// What the demo needs before it starts anything: root (bpftrace loads BPF
// programs and reads other processes' sockets), bpftrace, tracefs, and the
// tracepoints of one probe variant. Uses the doctor's checks; says what to
// run for each one missing.
import { collectChecks } from "../doctor.ts";

interface Missing {
  what: string;
  fix: string;
}

export async function missingForDemo(bpftrace = "bpftrace"): Promise<Missing[]> {
  const missing: Missing[] = [];
  const root = process.getuid?.() === 0;
  if (!root) {
    missing.push({
      what: "not running as root: bpftrace needs root to load its probes",
      fix: "sudo node_modules/.bin/node agent/src/cli.ts demo",
    });
  }
  const checks = new Map((await collectChecks(bpftrace)).map((check) => [check.name, check]));
  const report = (name: string, fallbackFix: string): boolean => {
    const check = checks.get(name);
    if (check === undefined || check.ok) return true;
    missing.push({ what: `${name}: ${check.detail}`, fix: check.fix ?? fallbackFix });
    return false;
  };
  report("bpftrace", "apt-get install bpftrace");
  // Without root, tracefs and the tracepoints under it may just be unreadable: no verdict on them.
  if (root && report("tracefs", "mount -t tracefs nodev /sys/kernel/tracing")) {
    report("BTF", "a kernel built with CONFIG_DEBUG_INFO_BTF=y");
    report("probe variant", "lostwrite doctor");
  }
  return missing;
}
