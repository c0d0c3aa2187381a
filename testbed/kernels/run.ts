// Command line of the kernel runner:
//   node testbed/kernels/run.ts KERNEL [--timeout SECONDS] -- COMMAND...
// Boots KERNEL (5.10, 6.1, 6.12 or a package name from kernels.ts), runs
// COMMAND in the repository as root, prints its output and exits with its
// exit code (125 when it never ran).
import { runInKernel } from "./runInKernel.ts";

const argv = process.argv.slice(2);
const dashes = argv.indexOf("--");
const [kernel, ...options] = dashes === -1 ? argv : argv.slice(0, dashes);
const command = dashes === -1 ? "" : argv.slice(dashes + 1).join(" ");
if (!kernel || !command) {
  console.error("usage: node testbed/kernels/run.ts KERNEL [--timeout SECONDS] -- COMMAND...");
  process.exit(2);
}
const timeoutIndex = options.indexOf("--timeout");
const timeoutS = timeoutIndex === -1 ? 600 : Number(options[timeoutIndex + 1]);
const result = await runInKernel(kernel, command, { timeoutMs: timeoutS * 1000 });
process.stdout.write(result.output);
const seconds = (ms: number | null): string => (ms === null ? "-" : `${(ms / 1000).toFixed(1)} s`);
console.error(`kernels: ${result.release}: boot ${seconds(result.bootMs)}, run ${seconds(result.runMs)}, exit ${result.exitCode ?? "none"}${result.timedOut ? " (timed out)" : ""}`);
if (result.exitCode === null) console.error(result.console.split("\n").slice(-30).join("\n"));
process.exit(result.exitCode ?? 125);
