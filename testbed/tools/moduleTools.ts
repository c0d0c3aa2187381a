// The tools the tests run that Debian ships too old or not at all (Prometheus 3
// and promtool, a current Alertmanager and amtool, Jaeger v2), built from their release sources on the
// Go module proxy at pinned versions, once per machine, into a cache
// directory: `npm run tools` (which `npm test` runs first) builds what is
// missing, and the tests find the binaries there.
//
// A module's own go.sum pins its dependencies; the module cache and the Go
// build cache make a second machine-wide build unnecessary and a rebuild after
// a cache loss fast.
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { goEnv, run } from "../goBuild.ts";

interface ModuleTool {
  /** The binary's name, e.g. "prometheus". */
  name: string;
  /** The Go module and its release, as the module proxy serves it. */
  module: string;
  version: string;
  /** The release as its users know it, printed by `--version`. */
  release: string;
  /** The main package inside the module, e.g. "cmd/prometheus". */
  pkg: string;
  /** Prepares the copied sources before the build (a file the module's zip leaves out). */
  prepare?: (sourceDir: string) => void;
  /** The Go variables `--version` prints and what to set them to (`-X name=value`): each project has its own. */
  versionVariables: (tool: ModuleTool) => Record<string, string>;
}

/** The `-ldflags` of a release build: no symbol table, and the tool's version variables set. */
export function versionFlags(tool: ModuleTool): string {
  const variables = Object.entries(tool.versionVariables(tool)).map(([name, value]) => ` -X ${name}=${value}`);
  return `-ldflags=-s -w${variables.join("")}`;
}

/** github.com/prometheus/common's version variables, which Prometheus's and Alertmanager's `--version` print. */
function prometheusCommonVersion(tool: ModuleTool): Record<string, string> {
  const v = "github.com/prometheus/common/version";
  return { [`${v}.Version`]: tool.release, [`${v}.Revision`]: `${tool.module}@${tool.version}`, [`${v}.Branch`]: "release" };
}

/**
 * Jaeger's own (internal/version, as its Makefile's BUILD_INFO_V2 sets them):
 * the v2 release tag, printed by `jaeger --version` and its `version` command.
 */
function jaegerVersion(tool: ModuleTool): Record<string, string> {
  const v = "github.com/jaegertracing/jaeger/internal/version";
  return { [`${v}.latestVersion`]: `v${tool.release}`, [`${v}.commitSHA`]: `${tool.module}@${tool.version}` };
}

const PROMETHEUS = { module: "github.com/prometheus/prometheus", version: "v0.316.0", release: "3.16.0", versionVariables: prometheusCommonVersion } as const;
const ALERTMANAGER = { module: "github.com/prometheus/alertmanager", version: "v0.35.0", release: "0.35.0", versionVariables: prometheusCommonVersion } as const;
/**
 * Jaeger v2 (an OpenTelemetry Collector distribution: OTLP receivers, memory
 * storage, the query API). Its Go module keeps v1 tags: v1.75.0 is the
 * release tagged v2.12.0 beside it. The module's go.mod has a `replace`
 * line, which the build honours because it runs inside the module's own copy.
 */
const JAEGER = { module: "github.com/jaegertracing/jaeger", version: "v1.75.0", release: "2.12.0", versionVariables: jaegerVersion } as const;

/**
 * Alertmanager's web UI is built by npm into ui/app/dist, which its module zip
 * does not carry, and the Go code embeds that directory: a page saying so
 * stands in for the UI. The API the tests use is unchanged.
 */
function alertmanagerUiPlaceholder(sourceDir: string): void {
  const dist = path.join(sourceDir, "ui", "app", "dist");
  mkdirSync(dist, { recursive: true });
  writeFileSync(path.join(dist, "index.html"), "<!doctype html><title>Alertmanager</title><p>Built without its web UI; the API is at /api/v2.</p>\n");
}

export const MODULE_TOOLS = {
  prometheus: { name: "prometheus", pkg: "cmd/prometheus", ...PROMETHEUS },
  promtool: { name: "promtool", pkg: "cmd/promtool", ...PROMETHEUS },
  alertmanager: { name: "alertmanager", pkg: "cmd/alertmanager", prepare: alertmanagerUiPlaceholder, ...ALERTMANAGER },
  amtool: { name: "amtool", pkg: "cmd/amtool", prepare: alertmanagerUiPlaceholder, ...ALERTMANAGER },
  jaeger: { name: "jaeger", pkg: "cmd/jaeger", ...JAEGER },
} as const satisfies Record<string, ModuleTool>;

export type ModuleToolName = keyof typeof MODULE_TOOLS;

/** Where built tools are kept: LOSTWRITE_TOOLS_DIR, else a cache directory that outlives a clone. */
export function toolsDir(): string {
  if (process.env.LOSTWRITE_TOOLS_DIR) return process.env.LOSTWRITE_TOOLS_DIR;
  if (process.env.XDG_CACHE_HOME) return path.join(process.env.XDG_CACHE_HOME, "lostwrite-tools");
  return process.getuid?.() === 0 ? "/var/cache/lostwrite-tools" : path.join(os.homedir(), ".cache", "lostwrite-tools");
}

/** Where `tool` is once built (it may not be yet). */
export function toolPath(tool: ModuleTool): string {
  return path.join(toolsDir(), `${tool.name}-${tool.version}`, tool.name);
}

/** The module's sources in the module cache, fetched from the proxy the first time. */
async function moduleSources(tool: ModuleTool): Promise<string> {
  const out = await run("go", ["mod", "download", "-json", `${tool.module}@${tool.version}`], { env: { ...goEnv(), GOFLAGS: "-mod=mod" }, timeoutMs: 600_000 });
  const dir = (JSON.parse(out) as { Dir?: string; Error?: string });
  if (!dir.Dir) throw new Error(`go mod download ${tool.module}@${tool.version}: ${dir.Error ?? "no directory"}`);
  return dir.Dir;
}

/** Builds `tool` unless it is in the cache; resolves to its path. */
export async function buildModuleTool(tool: ModuleTool, log: (line: string) => void = () => {}): Promise<string> {
  const out = toolPath(tool);
  if (existsSync(out)) return out;
  const started = Date.now();
  const work = mkdtempSync(path.join(os.tmpdir(), `lostwrite-${tool.name}-src-`));
  try {
    const sources = await moduleSources(tool);
    // The module cache is read-only: build in a writable copy.
    cpSync(sources, work, { recursive: true });
    chmodSync(work, 0o755);
    await run("chmod", ["-R", "u+w", work]);
    tool.prepare?.(work);
    mkdirSync(path.dirname(out), { recursive: true });
    const partial = `${out}.partial-${process.pid}`;
    // Niced: a cold build compiles hundreds of packages, and must not starve a test running beside it.
    await run("nice", ["-n", "10", "go", "build", "-trimpath", versionFlags(tool), "-o", partial, `./${tool.pkg}`], { cwd: work, timeoutMs: 1_800_000 });
    renameSync(partial, out);
    log(`built ${tool.name} ${tool.release} (${tool.module}@${tool.version}) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    return out;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
