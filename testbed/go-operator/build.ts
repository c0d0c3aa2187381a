// Builds the Go sample operator from its sources here (testbed/goBuild.ts).
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { buildGo } from "../goBuild.ts";

const SOURCE = path.dirname(fileURLToPath(import.meta.url));

/** Builds the operator into `dir`; stripped like most release builds (-s -w) or with its symbol table. */
/**
 * `buildId` (hex) replaces the GNU build id the linker derives from the
 * build: a binary nothing else on the machine shares a build id with, so no
 * debug file another process wrote for it (the Go probe's, by build id) is
 * found for it.
 */
export async function buildGoOperator(dir: string, opts: { stripped: boolean; buildId?: string }): Promise<string> {
  const name = opts.stripped ? "go-operator" : "go-operator-symbols";
  const ldflags = [...(opts.stripped ? ["-s", "-w"] : []), ...(opts.buildId === undefined ? [] : ["-B", `0x${opts.buildId}`])];
  return buildGo({
    source: SOURCE,
    workDir: mkdtempSync(path.join(os.tmpdir(), "lostwrite-go-operator-src-")),
    out: path.join(dir, name),
    flags: ldflags.length ? [`-ldflags=${ldflags.join(" ")}`] : [],
  });
}
