// Runs testbed/go-layout, the ground truth for what the HTTP/2 probes read in
// a Go binary, built once with the machine's Go into the matrix cache.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { buildGo, run } from "../goBuild.ts";
import { MATRIX_CACHE } from "./buildCell.ts";

const SOURCE = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "go-layout");

/** The family names go-layout reports under: net/http's bundled copy, golang.org/x/net/http2, net/http/internal/http2. */
export type LayoutFamilyName = "std" | "x/net" | "internal";

export interface GoParam {
  name: string;
  type: string;
}

/** Offsets by what the probe reads ("ClientConn.tconn.data"); what could not be found, with why, in missing. */
export interface FieldOffsets {
  offsets: Record<string, number>;
  missing: Record<string, string>;
}

export interface LayoutFamily extends FieldOffsets {
  /** Probed role → symbol, for the functions the pclntab holds. */
  functions: Record<string, string>;
  /** Probed roles whose function the binary lacks. */
  absent: string[];
  /** Probed role → parameters (receiver first, results left out), from DWARF. */
  signatures: Record<string, GoParam[]>;
  /** The family's struct types (ClientConn, clientStream, …) → size in bytes, from DWARF: they tell releases apart where the fields read stay put. */
  sizes: Record<string, number>;
}

export interface GoLayoutReport {
  binary: string;
  goVersion?: string;
  xNet?: string;
  dwarf: boolean;
  /** Only the families whose code the binary holds. */
  families: Partial<Record<LayoutFamilyName, LayoutFamily>>;
  /** The chain from a *tls.Conn to its descriptor, the same for every family. */
  socket: FieldOffsets;
}

let built: Promise<string> | undefined;

/** The go-layout binary, built on first use (and after its sources change). */
export function goLayoutBinary(): Promise<string> {
  built ??= buildGoLayout();
  return built;
}

async function buildGoLayout(): Promise<string> {
  const hash = createHash("sha256");
  for (const name of readdirSync(SOURCE).sort()) hash.update(name).update(readFileSync(path.join(SOURCE, name)));
  const out = path.join(MATRIX_CACHE, `go-layout-${hash.digest("hex").slice(0, 12)}`);
  if (existsSync(out)) return out;
  mkdirSync(MATRIX_CACHE, { recursive: true });
  const workDir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-go-layout-src-"));
  try {
    // Renamed into place once whole: a build cut short leaves nothing that looks built.
    renameSync(await buildGo({ source: SOURCE, workDir, out: `${out}.partial` }), out);
    return out;
  } finally {
    rmSync(workDir, { recursive: true, force: true });
  }
}

export async function goLayout(binary: string): Promise<GoLayoutReport> {
  return JSON.parse(await run(await goLayoutBinary(), [binary])) as GoLayoutReport;
}
