// Builds Go programs with the machine's Go toolchain. Each module pins its
// dependencies (golang.org/x/net) in go.mod and go.sum: the module proxy (or
// the module cache, once filled) serves exactly those, checked against go.sum.
// Used by the tests and the demo, which build the Go programs they run from
// source; the toolchain's build cache makes a second build nearly free.
import { execFile, spawnSync } from "node:child_process";
import { cpSync } from "node:fs";
import os from "node:os";
import path from "node:path";

/** `toolchain`: a GOTOOLCHAIN value (`go1.27.3` downloads that release through the module proxy); default as below. */
export function goEnv(goarch?: string, toolchain?: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    CGO_ENABLED: "0",
    // go.sum is committed: a build never rewrites it, nor go.mod.
    GOFLAGS: "-mod=readonly",
    GOWORK: "off",
    GO111MODULE: "on",
    // The toolchain on PATH, whatever go.mod's `go` line asks; a caller that
    // wants another sets GOTOOLCHAIN itself, or asks for one per build.
    GOTOOLCHAIN: toolchain ?? process.env.GOTOOLCHAIN ?? "local",
    GOARCH: goarch ?? "amd64",
  };
  // The toolchain refuses to run without a cache directory to use.
  if (!env.GOCACHE && !env.XDG_CACHE_HOME && !env.HOME) env.GOCACHE = path.join(os.tmpdir(), "lostwrite-go-cache");
  return env;
}

/** Why Go programs cannot be built here, or null when `go` works. */
export function goUnavailable(): string | null {
  const probe = spawnSync("go", ["version"], { env: goEnv(), encoding: "utf8" });
  if (probe.error) return `go toolchain not found (${probe.error.message})`;
  if (probe.status !== 0) return `go version failed: ${probe.stderr.trim()}`;
  return null;
}

export function run(file: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { cwd: opts.cwd, env: opts.env ?? goEnv(), maxBuffer: 64 << 20, timeout: opts.timeoutMs ?? 170_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${file} ${args.join(" ")} failed: ${error.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

interface GoBuild {
  /** The module's sources; copied first, so a build leaves nothing in the repository. */
  source: string;
  /** Where the binary goes. */
  out: string;
  /** A scratch directory for the copy. */
  workDir: string;
  /** Extra `go build` flags, e.g. ["-ldflags=-s -w"]. */
  flags?: readonly string[];
  goarch?: string;
  /** How long the build may take (default 170 s); a module with many dependencies takes longer from a cold cache. */
  timeoutMs?: number;
  /** GOTOOLCHAIN for this build, e.g. "go1.27.3"; default: the environment's, else the local toolchain. */
  toolchain?: string;
}

/** Builds one module; resolves to the binary's path. */
export async function buildGo(build: GoBuild): Promise<string> {
  cpSync(build.source, build.workDir, { recursive: true });
  await run("go", ["build", "-trimpath", ...(build.flags ?? []), "-o", build.out, "."], { cwd: build.workDir, env: goEnv(build.goarch, build.toolchain), timeoutMs: build.timeoutMs });
  return build.out;
}
