// The process probeProgram.ts starts once to make the kernel's BTF cut
// (kernelBtf.ts) and write it: reading the kernel's 5 MiB of BTF left the
// agent's Node some 5 MiB larger for good, freed but never given back by
// glibc and V8. This process takes that and exits.
import { readFileSync, writeFileSync } from "node:fs";
import { kernelTypeUse, trimKernelBtf } from "./kernelBtf.ts";

const [kernel, out, ...programs] = process.argv.slice(2);
if (kernel === undefined || out === undefined || programs.length === 0) {
  process.stderr.write("usage: kernelBtfChild KERNEL_BTF OUT PROGRAM.bt...\n");
  process.exit(2);
}
const use = kernelTypeUse(programs.map((file) => readFileSync(file, "utf8")));
writeFileSync(out, trimKernelBtf(readFileSync(kernel), use));
