// The process inspectApart.ts starts to inspect one binary: it runs
// inspectGoBinary on the path it is given and writes the report as one line
// of JSON. It lives only for that: what reading the binary's DWARF takes
// (tens of MiB inflated, and what glibc and V8 keep of it after) goes with it.
import { inspectGoBinary } from "./inspectGoBinary.ts";

const binary = process.argv[2];
if (binary === undefined) {
  process.stderr.write("usage: inspectChild BINARY\n");
  process.exit(2);
}
process.stdout.write(`${JSON.stringify(await inspectGoBinary(binary))}\n`);
