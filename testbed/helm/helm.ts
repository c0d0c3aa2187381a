// Real helm (v4) for the chart tests, built from source with the machine's Go:
// no helm package on the distribution, no binary download. go.mod and go.sum
// here pin helm.sh/helm/v4 and every module it needs; the module proxy (or
// the module cache) serves exactly those. The binary is kept in a cache
// directory per version, so only a machine's first run builds it.
//
//   node testbed/helm/helm.ts     build it now (`npm run tools` does, before the tests), print its path
//
// A cold build (about 130 modules, 550 MB of module cache) took 16 s to
// download and 6 min 50 s to compile under nice 19 on 2 busy cores (3 min
// 14 s of CPU); see docs/install.md.
import { existsSync, mkdirSync, renameSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { goEnv, run } from "../goBuild.ts";
import { toolsDir } from "../tools/moduleTools.ts";

const HELM_VERSION = "v4.3.2";
const SOURCE = path.dirname(fileURLToPath(import.meta.url));
/** A cold build on 2 busy cores takes about 7 minutes. */
const BUILD_TIMEOUT_MS = 1_200_000;

/** $HELM_BUILD_CACHE_DIR, else beside the other built tools (testbed/tools). */
function helmCacheDir(): string {
  return process.env.HELM_BUILD_CACHE_DIR ?? path.join(toolsDir(), "helm");
}

/** Where the cached binary is, built or not. */
function helmPath(): string {
  return path.join(helmCacheDir(), `helm-${HELM_VERSION}`);
}

/**
 * The path of helm, built first when the cache has none. The build runs at
 * nice 19: it takes minutes of CPU on machines that run latency-sensitive
 * tests. It writes to a temporary name and renames, so a build that is
 * interrupted never leaves a broken binary behind.
 */
export async function helmBinary(log: (line: string) => void = () => {}): Promise<string> {
  const out = helmPath();
  if (existsSync(out)) return out;
  mkdirSync(path.dirname(out), { recursive: true });
  const partial = `${out}.${process.pid}.partial`;
  log(`building helm ${HELM_VERSION} from source into ${out} (a first build takes minutes)`);
  const started = Date.now();
  await run(
    "nice",
    [
      "-n",
      "19",
      "go",
      "build",
      "-trimpath",
      // helm reports the version its release builds are stamped with.
      `-ldflags=-s -w -X helm.sh/helm/v4/internal/version.version=${HELM_VERSION}`,
      "-o",
      partial,
      "helm.sh/helm/v4/cmd/helm",
    ],
    { cwd: SOURCE, env: goEnv(), timeoutMs: BUILD_TIMEOUT_MS },
  );
  renameSync(partial, out);
  log(`built helm ${HELM_VERSION} in ${Math.round((Date.now() - started) / 1000)} s`);
  return out;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  console.log(await helmBinary((line) => console.error(`helm: ${line}`)));
}
