// Builds Go programs offline with the local toolchain (Debian's golang-go):
// no module downloads, golang.org/x/* taken from Debian's
// golang-golang-x-*-dev sources when a program needs them. Used by the tests
// and the demo, which build the Go programs they run from source.
import { execFile, spawnSync } from "node:child_process";
import { cpSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";

/** Debian's golang-golang-x-*-dev sources: the only x/net available without a network. */
export const DEBIAN_GOCODE = "/usr/share/gocode/src/golang.org/x";

export function goEnv(goarch?: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    CGO_ENABLED: "0",
    GOFLAGS: "-mod=mod",
    GOPROXY: "off",
    GOWORK: "off",
    GO111MODULE: "on",
    // Newer toolchains would try to download the go.mod's version otherwise.
    GOTOOLCHAIN: "local",
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

export function run(file: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { cwd: opts.cwd, env: opts.env ?? goEnv(), maxBuffer: 64 << 20, timeout: 170_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${file} ${args.join(" ")} failed: ${error.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

/** Points golang.org/x/{net,text,sys} of the module in `dir` at Debian's sources, where installed. */
export function useDebianXModules(dir: string): void {
  const goMod = path.join(dir, "go.mod");
  const replaces = ["net", "text", "sys"]
    .filter((module) => existsSync(path.join(DEBIAN_GOCODE, module, "go.mod")))
    .map((module) => `replace golang.org/x/${module} => ${path.join(DEBIAN_GOCODE, module)}\n`);
  writeFileSync(goMod, `${readFileSync(goMod, "utf8")}\n${replaces.join("")}`);
}

export interface GoBuild {
  /** The module's sources; copied first, as -mod=mod may rewrite go.mod. */
  source: string;
  /** Where the binary goes. */
  out: string;
  /** A scratch directory for the copy. */
  workDir: string;
  /** Extra `go build` flags, e.g. ["-ldflags=-s -w"]. */
  flags?: readonly string[];
  goarch?: string;
  /** The module imports golang.org/x/*: take them from Debian's sources. */
  xModules?: boolean;
}

/** Builds one module offline; resolves to the binary's path. */
export async function buildGo(build: GoBuild): Promise<string> {
  cpSync(build.source, build.workDir, { recursive: true });
  if (build.xModules) useDebianXModules(build.workDir);
  await run("go", ["build", "-trimpath", ...(build.flags ?? []), "-o", build.out, "."], { cwd: build.workDir, env: goEnv(build.goarch) });
  return build.out;
}
