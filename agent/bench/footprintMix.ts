// The workload `npm run bench:footprint` measures the agent under by default:
// the node of the footprint issue, three distinct Go operator binaries and one
// python TLS client, all real processes talking to the testbed apiserver (TLS,
// HTTP/2 and HTTP/1.1) and all followed by the agent. The Go operators are the
// sample operator built stripped and with its symbols (two files, so two
// programs) and the controller-runtime manager (client-go, informers); the
// python client keeps one TLS connection and writes a status every
// --interval, as an operator written with the kubernetes package does. Each
// operator's widget gets a new generation every --interval, so every operator
// reconciles and writes its status: the uprobes fire.
//
// The processes come one at a time (`steps`), so that what each adds can be
// read off: the socket probe alone, then 1, 2 and 3 Go binaries, then the
// python client (the TLS program).
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { copyFileSync, symlinkSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startApiserver, type Apiserver } from "../../testbed/apiserver/apiserver.ts";
import { buildCrOperator } from "../../testbed/cr-operator/build.ts";
import { buildGoOperator } from "../../testbed/go-operator/build.ts";
import { sleep } from "./agentRun.ts";

const here = path.dirname(fileURLToPath(import.meta.url));
const HTTPS_CLIENT = path.join(here, "../test/e2e/clients/lw_https_client.py");
const WIDGETS = "demo.lostwrite.dev/v1/widgets";

/**
 * The comms of every process of the mix, as the agent's --target-comm: a
 * prefix of their own (the binaries are copied, python run through a symlink,
 * under these names), so that no other go-operator, cr-operator or python on
 * the machine (another test's) becomes a target and adds to what is measured.
 */
export const MIX_TARGET_COMM = "^fpmix-";

export interface MixBinaries {
  goOperator: string;
  goOperatorSymbols: string;
  crOperator: string;
  python: string;
}

/** Builds the three Go binaries into `dir` (the controller-runtime one fetches its modules the first time), each under its mix name. */
export async function buildMixBinaries(dir: string): Promise<MixBinaries> {
  const named = (built: string, name: string): string => {
    const file = path.join(dir, name);
    copyFileSync(built, file);
    return file;
  };
  const python = path.join(dir, "fpmix-python");
  // The interpreter itself (python3 on PATH may be a version manager's shim script).
  symlinkSync(execFileSync("python3", ["-c", "import os, sys; print(os.path.realpath(sys.executable))"], { encoding: "utf8" }).trim(), python);
  return {
    goOperator: named(await buildGoOperator(dir, { stripped: true }), "fpmix-go-op"),
    goOperatorSymbols: named(await buildGoOperator(dir, { stripped: false }), "fpmix-go-op-sym"),
    crOperator: named(await buildCrOperator(dir, { stripped: false }), "fpmix-cr-op"),
    python,
  };
}

/** One process of the mix: what it is, and how the agent shows it is followed. */
export interface MixStep {
  name: string;
  /** The metric that counts it once its program attached, and the value it then has. */
  attached: { metric: string; value: number };
  start: (apiserver: Apiserver, intervalMs: number) => ChildProcess;
}

export function mixSteps(binaries: MixBinaries): MixStep[] {
  const goOperator = (binary: string, namespace: string) => (api: Apiserver, intervalMs: number): ChildProcess =>
    spawn(binary, ["--server", api.url, "--namespace", namespace, "--mode", "correct", "--family", "xnet", "--timeout", `${Math.max(1, intervalMs / 1000)}s`], {
      stdio: "ignore",
    });
  return [
    { name: "+ go-operator (stripped)", attached: { metric: "lostwrite_go_probes_attached", value: 1 }, start: goOperator(binaries.goOperator, "fp-go") },
    { name: "+ go-operator-symbols", attached: { metric: "lostwrite_go_probes_attached", value: 2 }, start: goOperator(binaries.goOperatorSymbols, "fp-go-symbols") },
    {
      name: "+ cr-operator-symbols (controller-runtime)",
      attached: { metric: "lostwrite_go_probes_attached", value: 3 },
      start: (api) =>
        spawn(binaries.crOperator, ["--kubeconfig", api.kubeconfigPath, "--namespace", "fp-cr", "--status-write", "patch"], { stdio: "ignore" }),
    },
    {
      name: "+ python TLS client",
      attached: { metric: "lostwrite_tls_probes_attached", value: 1 },
      start: (api, intervalMs) => {
        const child = spawn(binaries.python, [HTTPS_CLIENT, "127.0.0.1", String(api.port), "5"], { stdio: ["pipe", "ignore", "ignore"] });
        const statusPath = "/apis/demo.lostwrite.dev/v1/namespaces/fp-python/widgets/w/status";
        child.stdin.write("connect\n");
        // One request per interval on the one connection; the client answers each with a line we need not read.
        const timer = setInterval(() => child.stdin.write(`request PATCH ${statusPath} 100\n`), intervalMs);
        child.once("exit", () => clearInterval(timer));
        child.stdin.on("error", () => clearInterval(timer));
        return child;
      },
    },
  ];
}

/** The testbed apiserver, each operator's namespace given a widget whose generation moves every `intervalMs`. */
export async function startMixApiserver(dir: string, intervalMs: number): Promise<{ api: Apiserver; stop: () => Promise<void> }> {
  const api = await startApiserver({ dir });
  let generation = 0;
  const bump = (): void => {
    generation++;
    for (const namespace of ["fp-go", "fp-go-symbols", "fp-cr", "fp-python"]) {
      api.store.commit(WIDGETS, { apiVersion: "demo.lostwrite.dev/v1", kind: "Widget", metadata: { name: "w", namespace, generation }, spec: { size: generation } });
    }
  };
  bump();
  const timer = setInterval(bump, intervalMs);
  return {
    api,
    stop: async () => {
      clearInterval(timer);
      await api.close();
    },
  };
}

/** Reads one unlabelled sample of the agent's /metrics; NaN when absent. */
export async function metricValue(agentUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${agentUrl}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line === undefined ? NaN : Number(line.slice(name.length + 1));
}

/** Waits until the agent's metric reaches `value`. */
export async function waitForMetric(agentUrl: string, name: string, value: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const now = await metricValue(agentUrl, name).catch(() => NaN);
    if (now >= value) return;
    if (Date.now() > deadline) throw new Error(`${name} is ${now}, not ${value}, after ${timeoutMs / 1000} s`);
    await sleep(250);
  }
}
