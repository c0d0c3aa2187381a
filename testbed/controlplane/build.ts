// Builds the real control plane's two binaries from source with the machine's
// Go: kube-apiserver from k8s.io/kubernetes and etcd from
// go.etcd.io/etcd/server/v3, each in a throwaway module made here. Their
// sources come from the Go module proxy (then the module cache), checked
// against the checksum database; the compiled packages stay in Go's build
// cache, and each binary is kept under a cache directory keyed by its version
// and this recipe, so a machine builds each once.
//
// k8s.io/kubernetes is not made to be required: its go.mod lists its staging
// modules (k8s.io/api, k8s.io/apiserver, …) at v0.0.0 and points them at
// ./staging with `replace`, which applies only inside its own repository. A
// module that requires it therefore `replace`s each of them with the matching
// published release, v0.37.2 for v1.37.2; the list is read from that go.mod.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { goEnv, run } from "../goBuild.ts";
import { toolsDir } from "../tools/moduleTools.ts";

const KUBERNETES_VERSION = "v1.37.2";
const ETCD_VERSION = "v3.7.3";

/**
 * A cold build (nothing in the module cache or the build cache) compiles
 * about 2,000 packages; on 2 cores at the lowest priority that takes many
 * minutes (testbed/README.md has the times measured), more with the machine busy.
 */
const BUILD_TIMEOUT_MS = 40 * 60_000;

/** Changes when the steps below change, so that a binary built by older steps is not reused. */
const RECIPE_REVISION = 1;

/** Where built binaries are kept: $CONTROLPLANE_CACHE_DIR, else beside the other built tools (testbed/tools). */
function controlPlaneCacheDir(): string {
  return process.env.CONTROLPLANE_CACHE_DIR ?? path.join(toolsDir(), "controlplane");
}

export interface ControlPlaneBinaries {
  kubeApiserver: string;
  etcd: string;
}

interface BuildReport {
  binary: string;
  /** Seconds the build took; 0 when the binary came from the cache. */
  seconds: number;
  cached: boolean;
}

type Log = (line: string) => void;

/** The staging modules a k8s.io/kubernetes go.mod requires at v0.0.0, in the order it lists them. */
export function stagingModules(kubernetesGoMod: string): string[] {
  const modules: string[] = [];
  for (const raw of kubernetesGoMod.split("\n")) {
    const line = raw.replace(/\/\/.*$/, "").replace(/^\s*require\s+/, "").trim();
    const match = /^(k8s\.io\/\S+)\s+v0\.0\.0$/.exec(line);
    if (match && !modules.includes(match[1]!)) modules.push(match[1]!);
  }
  return modules;
}

/** The go.mod of the throwaway module that builds kube-apiserver `version` (v1.X.Y): its staging modules at v0.X.Y. */
export function kubeApiserverGoMod(version: string, kubernetesGoMod: string): string {
  const staging = `v0.${version.replace(/^v1\./, "")}`;
  const goLine = /^go\s+(\S+)/m.exec(kubernetesGoMod)?.[1] ?? "1.26.0";
  const replaces = stagingModules(kubernetesGoMod).map((m) => `replace ${m} => ${m} ${staging}`);
  if (replaces.length === 0) throw new Error(`k8s.io/kubernetes ${version}'s go.mod lists no staging module at v0.0.0`);
  return [`module lostwrite.local/kube-apiserver-build`, "", `go ${goLine}`, "", `require k8s.io/kubernetes ${version}`, "", ...replaces, ""].join("\n");
}

/** The environment of every step: the machine's toolchain, no cgo, and go.mod may be completed (it is generated, not committed). */
function buildEnv(): NodeJS.ProcessEnv {
  return { ...goEnv(), GOFLAGS: "-mod=mod" };
}

/** Go steps run at the lowest CPU priority: a cold build takes both cores for many minutes. */
const nice = (args: string[]): [string, string[]] => ["nice", ["-n", "19", "go", ...args]];

async function goVersion(): Promise<string> {
  return (await run("go", ["env", "GOVERSION"], { env: buildEnv() })).trim();
}

async function cachedBuild(name: string, version: string, log: Log, build: (workDir: string, out: string) => Promise<void>): Promise<BuildReport> {
  const key = createHash("sha256").update(JSON.stringify({ name, version, go: await goVersion(), RECIPE_REVISION })).digest("hex").slice(0, 12);
  const dir = path.join(controlPlaneCacheDir(), `${name}-${version}-${key}`);
  const binary = path.join(dir, name);
  if (existsSync(binary)) return { binary, seconds: 0, cached: true };
  mkdirSync(dir, { recursive: true });
  const workDir = mkdtempSync(path.join(os.tmpdir(), `lostwrite-${name}-build-`));
  const started = Date.now();
  log(`building ${name} ${version} (a first build on a machine takes many minutes)`);
  try {
    // Built beside, then renamed: a concurrent run never sees half a binary.
    const partial = `${binary}.${process.pid}.partial`;
    await build(workDir, partial);
    renameSync(partial, binary);
  } finally {
    rmSync(workDir, { recursive: true, force: true });
  }
  const seconds = Math.round((Date.now() - started) / 100) / 10;
  log(`built ${name} ${version} in ${seconds} s`);
  return { binary, seconds, cached: false };
}

/** kube-apiserver `version` from k8s.io/kubernetes, its version stamped in as the release's Makefile does. */
function buildKubeApiserver(log: Log = () => {}, version = KUBERNETES_VERSION): Promise<BuildReport> {
  return cachedBuild("kube-apiserver", version, log, async (workDir, out) => {
    const env = buildEnv();
    const opts = { cwd: workDir, env, timeoutMs: BUILD_TIMEOUT_MS };
    const info = JSON.parse(await run(...nice(["mod", "download", "-json", `k8s.io/kubernetes@${version}`]), opts)) as { GoMod?: string; Error?: string };
    if (!info.GoMod) throw new Error(`go mod download k8s.io/kubernetes@${version}: ${info.Error ?? "no go.mod"}`);
    writeFileSync(path.join(workDir, "go.mod"), kubeApiserverGoMod(version, readFileSync(info.GoMod, "utf8")));
    // Resolves every other dependency at the versions k8s.io/kubernetes pins, into go.mod and go.sum.
    await run(...nice(["get", `k8s.io/kubernetes/cmd/kube-apiserver@${version}`]), opts);
    const [major, minor] = version.replace(/^v/, "").split(".");
    const stamp = ["gitVersion=" + version, `gitMajor=${major}`, `gitMinor=${minor}`, "gitTreeState=clean"]
      .map((kv) => `-X k8s.io/component-base/version.${kv}`).join(" ");
    await run(...nice(["build", "-trimpath", `-ldflags=-s -w ${stamp}`, "-o", out, "k8s.io/kubernetes/cmd/kube-apiserver"]), opts);
  });
}

/** etcd `version`: go.etcd.io/etcd/server/v3 is etcd's main package. */
function buildEtcd(log: Log = () => {}, version = ETCD_VERSION): Promise<BuildReport> {
  return cachedBuild("etcd", version, log, async (workDir, out) => {
    const env = buildEnv();
    const opts = { cwd: workDir, env, timeoutMs: BUILD_TIMEOUT_MS };
    writeFileSync(path.join(workDir, "go.mod"), `module lostwrite.local/etcd-build\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 ${version}\n`);
    await run(...nice(["get", `go.etcd.io/etcd/server/v3@${version}`]), opts);
    await run(...nice(["build", "-trimpath", "-ldflags=-s -w", "-o", out, "go.etcd.io/etcd/server/v3"]), opts);
  });
}

/** Both binaries, one after the other (each build takes both cores). */
export async function buildControlPlane(log: Log = () => {}): Promise<ControlPlaneBinaries & { reports: BuildReport[] }> {
  const etcd = await buildEtcd(log);
  const kubeApiserver = await buildKubeApiserver(log);
  return { etcd: etcd.binary, kubeApiserver: kubeApiserver.binary, reports: [etcd, kubeApiserver] };
}
