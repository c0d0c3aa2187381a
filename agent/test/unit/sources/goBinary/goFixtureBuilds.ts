// Builds the Go fixture programs (agent/test/fixtures/go/) with the machine's
// toolchain, for the binary inspection tests. The toolchain's own
// build cache is kept, so a second run rebuilds nothing; the binaries go to a
// fresh temp directory per test file.
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { buildGo, run } from "../../../../../testbed/goBuild.ts";
import { repoPath } from "../../../repoPath.ts";

export { goUnavailable, run } from "../../../../../testbed/goBuild.ts";

const FIXTURES = repoPath("agent/test/fixtures/go") + "/";

export type GoFixture = "std-http2-client" | "xnet-http2-client" | "hello";

export interface GoBuildSpec {
  fixture: GoFixture;
  /** Extra `go build` flags, e.g. ["-ldflags=-s -w"]. */
  flags?: readonly string[];
  goarch?: string;
}

/** A describe/it skip value: the reason outside CI, false in CI, where a missing toolchain must fail the tests. */
export function skipUnlessCi(reason: string | null): string | false {
  return reason !== null && process.env.CI !== "true" ? reason : false;
}

/** The toolchain's version string, e.g. "go1.19.8". */
export async function goVersion(): Promise<string> {
  return (await run("go", ["env", "GOVERSION"])).trim();
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
      binaries[key] = await buildGo({
        source: path.join(FIXTURES, spec.fixture),
        workDir: path.join(dir, "src", key),
        out,
        flags: spec.flags ?? [],
        ...(spec.goarch === undefined ? {} : { goarch: spec.goarch }),
      });
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
