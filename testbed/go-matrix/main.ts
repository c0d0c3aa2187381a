// Builds testbed/go-operator for every cell of the Go × x/net matrix (or the
// cells named), cached under $TMPDIR/lostwrite-go-matrix, and prints each
// cell's build time and where its binaries are.
//
//	node testbed/go-matrix/main.ts [CELL…]
import { buildCell } from "./buildCell.ts";
import { MATRIX_CELLS } from "./cells.ts";
import { cellToolchainMissing } from "./cellToolchain.ts";

const wanted = process.argv.slice(2);
const unknown = wanted.filter((id) => !MATRIX_CELLS.some((c) => c.id === id));
if (unknown.length > 0) {
  console.error(`unknown cell(s) ${unknown.join(", ")}; cells: ${MATRIX_CELLS.map((c) => c.id).join(", ")}`);
  process.exit(2);
}
let failed = false;
const started = performance.now();
// One cell at a time: the go command already uses every core.
for (const cell of MATRIX_CELLS.filter((c) => wanted.length === 0 || wanted.includes(c.id))) {
  const missing = cellToolchainMissing(cell);
  if (missing !== null) {
    console.log(`${cell.id.padEnd(36)} not built: ${missing}`);
    failed = true;
    continue;
  }
  try {
    const build = await buildCell(cell);
    console.log(`${cell.id.padEnd(36)} ${build.seconds.toFixed(1).padStart(6)} s ${build.cached ? "cached" : "built "}  ${build.symbols}`);
  } catch (error) {
    console.log(`${cell.id.padEnd(36)} failed: ${error instanceof Error ? error.message : String(error)}`);
    failed = true;
  }
}
console.log(`all cells: ${((performance.now() - started) / 1000).toFixed(1)} s`);
process.exitCode = failed ? 1 : 0;
