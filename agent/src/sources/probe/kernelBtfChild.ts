// The process probeProgram.ts starts once to make the kernel's BTF cut
// (kernelBtf.ts) and write it, and to print, as JSON on its standard output,
// the offsets of the kernel's fields the programs take (`offsetof(struct S,
// F)`): reading the kernel's 5 MiB of BTF left the agent's Node some 5 MiB
// larger for good, freed but never given back by glibc and V8. This process
// takes that and exits.
import { readFileSync, writeFileSync } from "node:fs";
import { kernelFieldOffsets, kernelFieldsOf, kernelTypeUse, trimKernelBtf } from "./kernelBtf.ts";

const [kernelFile, out, ...programFiles] = process.argv.slice(2);
if (kernelFile === undefined || out === undefined || programFiles.length === 0) {
  process.stderr.write("usage: kernelBtfChild KERNEL_BTF OUT PROGRAM.bt...\n");
  process.exit(2);
}
const programs = programFiles.map((file) => readFileSync(file, "utf8"));
const kernel = readFileSync(kernelFile);
writeFileSync(out, trimKernelBtf(kernel, kernelTypeUse(programs)));
// A field this kernel lacks spares the cut: the programs that need it say so.
let answer: { offsets: Record<string, number> } | { offsetsError: string };
try {
  answer = { offsets: kernelFieldOffsets(kernel, kernelFieldsOf(programs)) };
} catch (error) {
  answer = { offsetsError: error instanceof Error ? error.message : String(error) };
}
process.stdout.write(`${JSON.stringify(answer)}\n`);
