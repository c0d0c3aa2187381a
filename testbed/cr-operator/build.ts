// Builds the controller-runtime operator from its sources here
// (testbed/goBuild.ts). Its dependencies (controller-runtime, client-go, the
// OpenTelemetry SDK) come from the Go module proxy the first time, pinned by
// go.sum, then from the module cache.
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { buildGo } from "../goBuild.ts";

const SOURCE = path.dirname(fileURLToPath(import.meta.url));

/** A first build on a machine fetches about 80 modules and compiles them all (see testbed/README.md for times). */
const BUILD_TIMEOUT_MS = 600_000;

interface CrOperatorBuild {
  /** true: `-ldflags=-s -w`, as many release images ship; false: as kubebuilder's Makefile builds a manager, symbols kept. */
  stripped: boolean;
  /** "local": the Go on PATH; "go1.27.3": that release, fetched by the go command (GOTOOLCHAIN). */
  go?: "local" | "go1.27.3";
  /** Build tags. */
  tags?: readonly string[];
}

/** The binary's file name; its first 15 bytes are its comm, so every variant's comm starts with "cr-operator". */
function crOperatorName(opts: CrOperatorBuild): string {
  const go = opts.go && opts.go !== "local" ? `-${opts.go}` : "";
  const tags = opts.tags?.length ? `-${opts.tags.join("_")}` : "";
  return `cr-operator${opts.stripped ? "" : "-symbols"}${go}${tags}`;
}

/** Builds the operator into `dir`; resolves to the binary's path. */
export async function buildCrOperator(dir: string, opts: CrOperatorBuild): Promise<string> {
  const flags: string[] = [];
  if (opts.stripped) flags.push("-ldflags=-s -w");
  if (opts.tags?.length) flags.push(`-tags=${opts.tags.join(",")}`);
  return buildGo({
    source: SOURCE,
    workDir: mkdtempSync(path.join(os.tmpdir(), "lostwrite-cr-operator-src-")),
    out: path.join(dir, crOperatorName(opts)),
    flags,
    toolchain: opts.go,
    timeoutMs: BUILD_TIMEOUT_MS,
  });
}
