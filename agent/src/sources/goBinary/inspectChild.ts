// The process inspectApart.ts starts to inspect one binary: it runs
// inspectGoBinary on the descriptor it is handed (fd 3, opened by the agent
// while the target still ran: a kubectl is gone before this process starts)
// and writes the report as one line of JSON, under the binary's own path. It
// lives only for that: what reading the binary's DWARF takes (tens of MiB
// inflated, and what glibc and V8 keep of it after) goes with it.
import { inspectGoBinary } from "./inspectGoBinary.ts";

/** The descriptor the agent hands over, as this process can open it again. */
const HANDED = "/proc/self/fd/3";

const binary = process.argv[2];
if (binary === undefined) {
  process.stderr.write("usage: inspectChild BINARY (its descriptor as fd 3)\n");
  process.exit(2);
}
const report = await inspectGoBinary(HANDED);
// Said of the binary by its own path, as an inspection in the agent says it.
const named = report.ok ? { ...report, path: binary } : { ...report, path: binary, reason: report.reason.replaceAll(HANDED, binary) };
process.stdout.write(`${JSON.stringify(named)}\n`);
