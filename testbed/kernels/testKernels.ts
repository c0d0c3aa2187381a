// `npm run test:kernels`: the kernel smoke suite (agent/test/kernels/smoke.test.ts)
// inside a VM booted on each kernel of kernels.ts, then docs/kernels.md from
// what each kernel's last run found (kept in the cache directory, so that a
// run of one kernel leaves the others' last results in the page).
//   node testbed/kernels/testKernels.ts [--kernel NAME]... [--doc-only]
// --doc-only boots nothing: it writes docs/kernels.md from the last runs again.
// The Go operator is built here on the host first: the guest sees the host's
// files, and a Go build under software emulation would take minutes.
// Exit code 0 only when the suite passed on every kernel.
import { mkdirSync, mkdtempSync, readFileSync, existsSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { KernelResults } from "../../agent/test/kernels/results.ts";
import { buildGoOperator } from "../go-operator/build.ts";
import { cacheDir } from "./kernelCache.ts";
import { KERNELS, kernelNamed } from "./kernels.ts";
import { renderKernelsDoc, type KernelRun } from "./kernelsDoc.ts";
import { waitForQuietMachine } from "./quietMachine.ts";
import { runInKernel } from "./runInKernel.ts";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const log = (line: string): void => console.error(`test:kernels: ${line}`);

/** One kernel's whole run, boot included: the suite under TCG takes minutes, its own limit is 15. */
const KERNEL_TIMEOUT_MS = 20 * 60_000;

const names = process.argv.flatMap((arg, i, all) => (all[i - 1] === "--kernel" ? [arg] : []));
const docOnly = process.argv.includes("--doc-only");
const kernels = docOnly ? [] : names.length ? names.map(kernelNamed) : [...KERNELS];

const work = mkdtempSync(path.join(os.tmpdir(), "lostwrite-test-kernels-"));
if (kernels.length) log("building the Go operator on the host");
const goOperator = kernels.length ? await buildGoOperator(work, { stripped: true }) : "";

/** The lines that say what failed: node's test failures and bpftrace's errors. */
function failureLines(output: string): string {
  const lines = output.split("\n").filter((line) => /✖|ERROR|Error:|error:|not ready|exited with/.test(line));
  return [...new Set(lines)].slice(0, 30).join("\n");
}

const lastRuns = path.join(cacheDir(), "last-runs");
mkdirSync(lastRuns, { recursive: true });
const lastRunFile = (name: string): string => path.join(lastRuns, `${name}.json`);
const passed: boolean[] = [];
for (const kernel of kernels) {
  await waitForQuietMachine(log);
  log(`Linux ${kernel.name} (${kernel.package}): booting`);
  const resultsFile = path.join(work, `results-${kernel.name}.json`);
  const result = await runInKernel(
    kernel,
    "node_modules/.bin/node --test --test-reporter=spec --test-timeout=900000 agent/test/kernels/smoke.test.ts",
    { timeoutMs: KERNEL_TIMEOUT_MS, rwDirs: [work], env: { CI: "true", KERNEL_SMOKE_GO_OPERATOR: goOperator, KERNEL_SMOKE_RESULTS: resultsFile } },
  );
  process.stdout.write(result.output);
  if (result.exitCode === null) process.stdout.write(result.console.split("\n").slice(-40).join("\n"));
  const results = existsSync(resultsFile) ? (JSON.parse(readFileSync(resultsFile, "utf8")) as KernelResults) : null;
  const run: KernelRun = {
    kernel: kernel.name,
    package: kernel.package,
    release: result.release,
    results,
    exitCode: result.exitCode,
    bootMs: result.bootMs,
    runMs: result.runMs,
    failure: result.exitCode === 0 ? null : failureLines(result.output) || (result.timedOut ? "timed out" : "the suite never ran; see the VM console above"),
  };
  writeFileSync(lastRunFile(kernel.name), JSON.stringify(run, null, 2));
  passed.push(run.exitCode === 0);
  log(`Linux ${kernel.name}: exit ${result.exitCode ?? "none"}, boot ${result.bootMs} ms, run ${result.runMs} ms`);
}

const notes = readFileSync(path.join(REPO, "testbed/kernels/notes.md"), "utf8");
const runs = KERNELS.filter((k) => existsSync(lastRunFile(k.name))).map((k) => JSON.parse(readFileSync(lastRunFile(k.name), "utf8")) as KernelRun);
writeFileSync(path.join(REPO, "docs/kernels.md"), renderKernelsDoc(runs, new Date(), notes));
log("wrote docs/kernels.md");
rmSync(work, { recursive: true, force: true });
process.exit(passed.every(Boolean) ? 0 : 1);
