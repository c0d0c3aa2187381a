// Builds testbed/go-operator for one matrix cell, with symbols and DWARF
// (plain go build) and stripped (-s -w, as most release builds), into a cache
// directory that outlives the run: a cell is rebuilt only when its binaries
// are missing or the recipe changed (the operator's sources, the cell).
import { createHash } from "node:crypto";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { run } from "../goBuild.ts";
import type { MatrixCell } from "./cells.ts";
import { cellToolchain, type CellToolchain } from "./cellToolchain.ts";

const OPERATOR_SOURCE = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "go-operator");
export const MATRIX_CACHE = path.join(os.tmpdir(), "lostwrite-go-matrix");
/** Bump when the way a cell is built changes, so cached builds are redone. */
const RECIPE_VERSION = 1;

export interface CellBuild {
  cell: MatrixCell;
  /** Plain go build: symbol table and DWARF. */
  symbols: string;
  /** -ldflags=-s -w. */
  stripped: string;
  /** The go.mod the build used (GOPATH mode: none). */
  goMod: string | null;
  cached: boolean;
  /** Wall time of this call: the whole build, or the cache check. */
  seconds: number;
}

export async function buildCell(cell: MatrixCell): Promise<CellBuild> {
  const started = performance.now();
  const dir = path.join(MATRIX_CACHE, cell.id);
  const symbols = path.join(dir, "go-operator-symbols");
  const stripped = path.join(dir, "go-operator");
  const recipeFile = path.join(dir, "recipe");
  const goModFile = path.join(dir, "go.mod");
  const recipe = recipeOf(cell);
  const seconds = (): number => (performance.now() - started) / 1000;
  const goModUsed = (): string | null => (existsSync(goModFile) ? readFileSync(goModFile, "utf8") : null);

  if (existsSync(symbols) && existsSync(stripped) && existsSync(recipeFile) && readFileSync(recipeFile, "utf8") === recipe) {
    return { cell, symbols, stripped, goMod: goModUsed(), cached: true, seconds: seconds() };
  }
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const work = mkdtempSync(path.join(os.tmpdir(), "lostwrite-go-matrix-src-"));
  try {
    cpSync(OPERATOR_SOURCE, work, { recursive: true, filter: (file) => !file.endsWith(".ts") });
    const toolchain = cellToolchain(cell);
    await assertGoVersion(cell, toolchain, work);
    if (toolchain.modules) {
      await pinXNet(cell, toolchain, work);
      cpSync(path.join(work, "go.mod"), goModFile);
    } else {
      // GOPATH mode reads no go.mod; one left there would only confuse.
      rmSync(path.join(work, "go.mod"));
      rmSync(path.join(work, "go.sum"));
    }
    const tags = cell.tags.length > 0 ? [`-tags=${cell.tags.join(",")}`] : [];
    // Each binary is written beside its final name and renamed: a build cut
    // short never leaves a file that looks cached.
    for (const [out, flags] of [[symbols, []], [stripped, ["-ldflags=-s -w"]]] as const) {
      await run(toolchain.go, ["build", "-trimpath", ...tags, ...flags, "-o", `${out}.partial`, "."], { cwd: work, env: toolchain.env });
      renameSync(`${out}.partial`, out);
    }
    writeFileSync(recipeFile, recipe);
    return { cell, symbols, stripped, goMod: goModUsed(), cached: false, seconds: seconds() };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * Sets the cell's x/net in the copy's go.mod and lets tidy settle the rest
 * (go.sum, x/text, the `go` line a newer x/net asks for): the committed
 * go.mod stays as it is. Modules come from the module cache, else the proxy.
 */
async function pinXNet(cell: MatrixCell, toolchain: CellToolchain, work: string): Promise<void> {
  // -mod=readonly would forbid exactly the edit wanted here.
  const env = { ...toolchain.env, GOFLAGS: "" };
  await run(toolchain.go, ["mod", "edit", `-require=golang.org/x/net@${cell.xNet}`], { cwd: work, env });
  await run(toolchain.go, ["mod", "tidy"], { cwd: work, env });
}

/** The cell's label names a Go release; a build with another would mislabel every result. */
async function assertGoVersion(cell: MatrixCell, toolchain: CellToolchain, work: string): Promise<void> {
  const version = (await run(toolchain.go, ["env", "GOVERSION"], { cwd: work, env: toolchain.env })).trim();
  if (version !== cell.toolchain.version && !version.startsWith(`${cell.toolchain.version}.`)) {
    throw new Error(`cell ${cell.id}: ${toolchain.go} is ${version}, not ${cell.toolchain.version}`);
  }
}

function recipeOf(cell: MatrixCell): string {
  const hash = createHash("sha256").update(JSON.stringify({ RECIPE_VERSION, cell }));
  for (const name of readdirSync(OPERATOR_SOURCE).filter((f) => !f.endsWith(".ts")).sort()) {
    hash.update(name).update(readFileSync(path.join(OPERATOR_SOURCE, name)));
  }
  return hash.digest("hex");
}
