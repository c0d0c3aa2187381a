// docs/kernels.md from the last `npm run test:kernels`: per kernel, the
// variant chosen, each probe family loaded or not, each fault expected vs
// detected, `lostwrite doctor`'s checks, and boot and run times.
import { familyState, type KernelResults } from "../../agent/test/kernels/results.ts";

export interface KernelRun {
  kernel: string;
  package: string;
  release: string;
  /** The smoke suite's findings; null when it wrote none (the VM or the suite failed early). */
  results: KernelResults | null;
  exitCode: number | null;
  bootMs: number | null;
  runMs: number | null;
  /** What went wrong when the suite did not pass: the failing lines of its output. */
  failure: string | null;
}

const seconds = (ms: number | null): string => (ms === null ? "-" : `${(ms / 1000).toFixed(1)} s`);
const cell = (text: string): string => text.replaceAll("|", "\\|");

function kernelSection(run: KernelRun): string {
  const lines = [`## Linux ${run.kernel} (\`${run.package}\`, ${run.release})`, ""];
  const verdict = run.exitCode === 0 ? "passed" : run.exitCode === null ? "did not finish" : `failed (exit ${run.exitCode})`;
  lines.push(`Suite ${verdict}. Boot ${seconds(run.bootMs)}, run ${seconds(run.runMs)}.`, "");
  const r = run.results;
  if (r === null) {
    lines.push("The suite wrote no results.", "");
  } else {
    lines.push(`Probe variant chosen: **${r.variant ?? "none (the agent did not start)"}**.`, "");
    lines.push("| probe family | loaded |", "|---|---|", ...r.families.map((f) => `| ${cell(f.family)} | ${cell(familyState(f, "yes", "**no**"))} |`), "");
    lines.push(
      "| fault | expected | detected | |",
      "|---|---|---|---|",
      ...r.faults.map((f) => `| ${cell(f.fault)} | ${cell(f.expected)} | ${cell(f.detected)} | ${f.detected === f.expected ? "ok" : "**mismatch**"} |`),
      "",
    );
    if (r.doctor.length) lines.push("`lostwrite doctor`:", "", "```", ...r.doctor, "```", "");
  }
  if (run.failure) lines.push("What failed:", "", "```", run.failure, "```", "");
  return lines.join("\n");
}

export function renderKernelsDoc(runs: KernelRun[], when: Date, notes: string): string {
  return [
    "# lostwrite on the kernels users run",
    "",
    "<!-- Written by `npm run test:kernels` (testbed/kernels/testKernels.ts); the notes section is kept in testbed/kernels/notes.md. -->",
    "",
    `Written ${when.toISOString().slice(0, 16).replace("T", " ")} UTC from each kernel's last run of the kernel smoke suite (\`agent/test/kernels/smoke.test.ts\`) in a VM`,
    "booted on each Debian kernel, under software emulation (qemu TCG, 2 virtual CPUs, 3 GiB). Boot is from starting",
    "virtme-ng to the suite's start in the guest; run is the suite itself (`node --test`, the agent and its bpftrace",
    "compiles included).",
    "",
    "| kernel | variant | socket program | Go request uprobes | TLS program | faults detected as expected | boot | run |",
    "|---|---|---|---|---|---|---|---|",
    ...runs.map((run) => {
      const r = run.results;
      const family = (prefix: string): string => {
        const f = r?.families.find((x) => x.family.startsWith(prefix));
        return f === undefined ? "-" : f.notStarted !== undefined ? "not started" : f.loaded ? "loaded" : "**not loaded**";
      };
      const faults = r ? `${r.faults.filter((f) => f.detected === f.expected).length}/${r.faults.length}` : "-";
      return `| ${run.kernel} | ${r?.variant ?? "-"} | ${family("socket")} | ${family("Go")} | ${family("TLS")} | ${faults} | ${seconds(run.bootMs)} | ${seconds(run.runMs)} |`;
    }),
    "",
    ...runs.map(kernelSection),
    notes.trim(),
    "",
  ].join("\n");
}
