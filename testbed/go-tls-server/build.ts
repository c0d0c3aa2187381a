// Builds the Go TLS server from its sources here (testbed/goBuild.ts).
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { buildGo } from "../goBuild.ts";

const SOURCE = path.dirname(fileURLToPath(import.meta.url));

/** Builds the server into `dir`; resolves to the binary's path. */
export async function buildGoTlsServer(dir: string): Promise<string> {
  return buildGo({ source: SOURCE, workDir: mkdtempSync(path.join(os.tmpdir(), "lostwrite-go-tls-server-src-")), out: path.join(dir, "go-tls-server") });
}
