// What the kernel smoke suite found on one kernel, as it writes it for
// `npm run test:kernels` (testbed/kernels/testKernels.ts), and the table it
// prints: the variant chosen, each probe family loaded or not, and each fault
// expected vs detected.

export interface FaultVerdict {
  fault: string;
  expected: string;
  detected: string;
}

export interface KernelResults {
  /** uname -r inside the VM. */
  kernel: string;
  /** The probe variant the agent chose ("sockets" or "syscalls"), null when it did not start. */
  variant: string | null;
  /** `lostwrite doctor`'s check lines, "ok name: detail" or "FAIL name: detail". */
  doctor: string[];
  /** `notStarted`: why the agent does not start this family on this kernel, by design (then `loaded` is false and expected). */
  families: { family: string; loaded: boolean; notStarted?: string }[];
  faults: FaultVerdict[];
}

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]): string => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd();
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}

/** A family's state in a table: loaded, not loaded (a failure), or not started on this kernel by design. */
export function familyState(f: KernelResults["families"][number], loaded: string, notLoaded: string): string {
  if (f.notStarted !== undefined) return `not started: ${f.notStarted}`;
  return f.loaded ? loaded : notLoaded;
}

/** The plain-text tables the suite prints at its end. */
export function kernelResultsTable(results: KernelResults): string {
  return [
    `kernel ${results.kernel}: probe variant ${results.variant ?? "none (agent did not start)"}`,
    table(["probe family", "loaded"], results.families.map((f) => [f.family, familyState(f, "yes", "NO")])),
    table(
      ["fault", "expected", "detected", ""],
      results.faults.map((f) => [f.fault, f.expected, f.detected, f.detected === f.expected ? "ok" : "MISMATCH"]),
    ),
  ].join("\n\n");
}
