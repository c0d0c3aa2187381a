// What the demo needs before it starts anything: root (bpftrace loads BPF
// programs and reads other processes' sockets), bpftrace, tracefs, and the
// tracepoints of one probe variant. Uses the doctor's checks; says what to
// run for each one missing.
import { collectChecks } from "../doctor.ts";

export interface Missing {
  what: string;
  fix: string;
}

// The doctor's checks the demo cannot run without.
const NEEDED = new Set(["tracefs", "BTF", "bpftrace", "probe variant"]);

export async function missingForDemo(bpftrace = "bpftrace"): Promise<Missing[]> {
  const missing: Missing[] = [];
  if (process.getuid?.() !== 0) {
    missing.push({ what: "not running as root: bpftrace needs root to load its probes", fix: "run it with sudo: sudo node_modules/.bin/node agent/src/cli.ts demo" });
  }
  for (const check of await collectChecks(bpftrace)) {
    if (check.ok || !NEEDED.has(check.name)) continue;
    missing.push({ what: `${check.name}: ${check.detail}`, fix: check.fix ?? "see `lostwrite doctor`" });
  }
  return missing;
}
