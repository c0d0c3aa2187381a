// Builds the Go fixture programs (agent/test/fixtures/go/) with the local
// toolchain, offline, for the binary inspection tests. The toolchain's own
// build cache is kept, so a second run rebuilds nothing; the binaries go to a
// fresh temp directory per test file.
import { execFile, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { repoPath } from "../../../repoPath.ts";

const FIXTURES = repoPath("agent/test/fixtures/go") + "/";
/** Debian's golang-golang-x-*-dev sources: the only x/net available without a network. */
const DEBIAN_GOCODE = "/usr/share/gocode/src/golang.org/x";

export type GoFixture = "std-http2-client" | "xnet-http2-client" | "hello";

export interface GoBuildSpec {
  fixture: GoFixture;
  /** Extra `go build` flags, e.g. ["-ldflags=-s -w"]. */
  flags?: readonly string[];
  goarch?: string;
}

function goEnv(goarch?: string): NodeJS.ProcessEnv {
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

/** Why Go tests cannot run here, or null when `go` works. */
export function goUnavailable(): string | null {
  const probe = spawnSync("go", ["version"], { env: goEnv(), encoding: "utf8" });
  if (probe.error) return `go toolchain not found (${probe.error.message})`;
  if (probe.status !== 0) return `go version failed: ${probe.stderr.trim()}`;
  return null;
}

/** A describe/it skip value: the reason outside CI, false in CI, where a missing toolchain must fail the tests. */
export function skipUnlessCi(reason: string | null): string | false {
  return reason !== null && process.env.CI !== "true" ? reason : false;
}

export function run(file: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { cwd: opts.cwd, env: opts.env ?? goEnv(), maxBuffer: 64 << 20, timeout: 170_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${file} ${args.join(" ")} failed: ${error.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

/** The toolchain's version string, e.g. "go1.19.8". */
export async function goVersion(): Promise<string> {
  return (await run("go", ["env", "GOVERSION"])).trim();
}

/** Copies a fixture to `dir`, pointing x/net and its dependencies at the Debian sources when present. */
function prepareFixture(fixture: GoFixture, dir: string): void {
  cpSync(path.join(FIXTURES, fixture), dir, { recursive: true });
  if (fixture === "xnet-http2-client") {
    const goMod = path.join(dir, "go.mod");
    const replaces = ["net", "text", "sys"]
      .filter((module) => existsSync(path.join(DEBIAN_GOCODE, module, "go.mod")))
      .map((module) => `replace golang.org/x/${module} => ${path.join(DEBIAN_GOCODE, module)}\n`);
    writeFileSync(goMod, `${readFileSync(goMod, "utf8")}\n${replaces.join("")}`);
  }
}

/** The x/net directory a fixture build is pointed at, or null when the module cache must provide it. */
export function xNetReplacement(): string | null {
  const dir = path.join(DEBIAN_GOCODE, "net");
  return existsSync(path.join(dir, "go.mod")) ? dir : null;
}

/** Builds every spec, two at a time (the toolchain is itself parallel), and returns the binaries' paths by key. */
export async function buildGoFixtures<K extends string>(specs: Record<K, GoBuildSpec>): Promise<{ dir: string; binaries: Record<K, string> }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-gobin-"));
  const binaries = {} as Record<K, string>;
  const queue = Object.entries(specs) as [K, GoBuildSpec][];
  const worker = async (): Promise<void> => {
    for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
      const [key, spec] = next;
      const out = path.join(dir, "bin", key);
      // One copy of the sources per build: -mod=mod may rewrite go.mod, and
      // two builds must not do that to the same file at once.
      const source = path.join(dir, "src", key);
      prepareFixture(spec.fixture, source);
      await run("go", ["build", "-trimpath", ...(spec.flags ?? []), "-o", out, "."], {
        cwd: source,
        env: goEnv(spec.goarch),
      });
      binaries[key] = out;
    }
  };
  await Promise.all([worker(), worker()]);
  return { dir, binaries };
}

/** Text symbols of an unstripped binary, by name, as `go tool nm` reads them from its symbol table. */
export async function goToolNm(binary: string): Promise<Map<string, number>> {
  const symbols = new Map<string, number>();
  for (const line of (await run("go", ["tool", "nm", binary])).split("\n")) {
    const match = /^\s*([0-9a-f]+) [Tt] (.+)$/.exec(line);
    if (match) symbols.set(match[2]!, parseInt(match[1]!, 16));
  }
  return symbols;
}
