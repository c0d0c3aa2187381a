// Builds the Go sample operator from its sources here (testbed/goBuild.ts).
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { buildGo } from "../goBuild.ts";

const SOURCE = path.dirname(fileURLToPath(import.meta.url));

/** Builds the operator into `dir`; stripped like most release builds (-s -w) or with its symbol table. */
export async function buildGoOperator(dir: string, opts: { stripped: boolean }): Promise<string> {
  const name = opts.stripped ? "go-operator" : "go-operator-symbols";
  return buildGo({
    source: SOURCE,
    workDir: mkdtempSync(path.join(os.tmpdir(), "lostwrite-go-operator-src-")),
    out: path.join(dir, name),
    flags: opts.stripped ? ["-ldflags=-s -w"] : [],
  });
}
