// The whole system on loopback for e2e tests, as real processes: the testbed
// apiserver (in this process, so tests arm faults and write Widgets
// directly), sample operator process(es) in a chosen mode sending their spans
// to the agent over OTLP/HTTP, the agent (a child process, real bpftrace)
// watching the operators' pids and the apiserver endpoint, and Jaeger v2 as
// the trace backend (support/jaeger.ts): it receives the operators' batches
// through the agent's --otlp-forward and the agent's own `status write lost`
// spans through the standard OTEL_EXPORTER_OTLP_* variables, and tests read
// the traces back through its query API, as a user's dashboard link does.
//
// Order matters: the operators start first (they only list and watch, no
// Widget exists yet, so no status write happens), then the agent with their
// pids; only once it is ready do tests create Widgets and arm faults. Every
// status write a test faults is therefore made under the probe. Teardown
// always runs, also when start-up fails half-way.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startApiserver, type Apiserver } from "../../../../testbed/apiserver/apiserver.ts";
import type { Mode } from "../../../../testbed/operator/reconciler.ts";
import { startAgentProcess, waitFor, type AgentProcess } from "./agentProcess.ts";
import { startJaeger, type RunningJaeger } from "./jaeger.ts";
import { locateTool } from "./tools.ts";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");
const node = path.join(repoRoot, "node_modules/.bin/node");

export const WIDGETS = "demo.lostwrite.dev/v1/widgets";

// ---------------------------------------------------------------- operator

export interface OperatorProcess {
  readonly pid: number;
  readonly mode: Mode;
  /** The only namespace it watches; null for all. */
  readonly namespace: string | null;
  /** Its OTEL_SERVICE_NAME. */
  readonly serviceName: string;
  /** Its JSON log lines so far (stdout), for assertions and failure messages. */
  readonly log: string[];
  stop(): Promise<void>;
}

async function startOperatorProcess(opts: OperatorOptions & {
  kubeconfig: string;
  otlpEndpoint: string;
  serviceName: string;
}): Promise<OperatorProcess> {
  // The kernel kills the operator if the test process dies without teardown.
  const setpriv = locateTool("setpriv", "util-linux").path;
  // The testbed operator's only handle that keeps Node running is its
  // informer's watch (the watch restart timer is unref'd), so a fault that
  // kills every connection made it exit with code 0, spans unsent. A real
  // operator's metrics/health server keeps it up; this interval stands in.
  const keepAlive = "data:text/javascript,setInterval(() => {}, 1 << 30)";
  const argv = [node, "--import", keepAlive, path.join(repoRoot, "testbed/operator/main.ts"), "--kubeconfig", opts.kubeconfig,
    "--mode", opts.mode, "--workers", String(opts.workers ?? 2), "--backoff-base-ms", "100",
    ...(opts.namespace === undefined ? [] : ["--namespace", opts.namespace]),
    ...(opts.throttleRetries ? ["--throttle-retries", String(opts.throttleRetries)] : [])];
  const [file, args] = setpriv ? [setpriv, ["--pdeathsig", "KILL", ...argv]] : [argv[0]!, argv.slice(1)];
  const child: ChildProcess = spawn(file, args, {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "pipe"],
    env: {
      ...process.env,
      OTEL_EXPORTER_OTLP_ENDPOINT: opts.otlpEndpoint,
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_SERVICE_NAME: opts.serviceName,
      OTEL_BSP_SCHEDULE_DELAY: "100",
    },
  });
  const log: string[] = [];
  let buffered = "";
  const take = (chunk: string): void => {
    buffered += chunk;
    let nl: number;
    while ((nl = buffered.indexOf("\n")) !== -1) {
      log.push(buffered.slice(0, nl));
      buffered = buffered.slice(nl + 1);
    }
  };
  child.stdout!.setEncoding("utf8").on("data", take);
  child.stderr!.setEncoding("utf8").on("data", take);
  const exited = new Promise<void>((resolve) =>
    child.once("exit", (code, signal) => {
      log.push(`(operator exited: code ${code}, signal ${signal})`);
      resolve();
    }),
  );
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(timer);
  };
  try {
    await waitFor(`the ${opts.mode} operator to start`, () => {
      if (child.exitCode !== null) throw new Error(`operator exited with ${child.exitCode}:\n${log.join("\n")}`);
      return log.some((line) => line.includes('"msg":"started"'));
    }, 20_000);
  } catch (error) {
    await stop();
    throw error;
  }
  return { pid: child.pid!, mode: opts.mode, namespace: opts.namespace ?? null, serviceName: opts.serviceName, log, stop };
}

// ---------------------------------------------------------------- stack

/**
 * A free loopback port outside Linux's ephemeral range (32768-60999). It stays
 * unbound for seconds while the operators start; the ports startAgentProcess
 * and others pick with listen(0) come from the ephemeral range, so they
 * cannot take it meanwhile.
 */
async function portBelowEphemeralRange(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const server = createServer();
    const bound = await new Promise<boolean>((resolve) => {
      server.once("error", () => resolve(false));
      server.listen(port, "127.0.0.1", () => resolve(true));
    });
    if (bound) {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      return port;
    }
  }
  throw new Error("no free loopback port in 20000-31999 after 50 attempts");
}

export interface OperatorOptions {
  mode: Mode;
  /** Watch only this namespace (default: all). */
  namespace?: string;
  /** Reconcile workers (default 2). */
  workers?: number;
  /** 429s waited out and sent again within the reconcile, as client-go does (default 0). */
  throttleRetries?: number;
}

export interface StackOptions {
  /** One operator process each, OTEL_SERVICE_NAME `widget-operator-<mode>-<index>`. */
  operators: OperatorOptions[];
  /** The agent's --correlation-window (default 3s). */
  correlationWindow?: string;
  /** The agent's --node-name (default e2e-node). */
  nodeName?: string;
  /** More agent flags. */
  agentArgs?: string[];
}

export interface TestbedStack {
  apiserver: Apiserver;
  agent: AgentProcess;
  operators: OperatorProcess[];
  /** The trace backend: the agent's `status write lost` spans and the operators' forwarded spans, by trace id. */
  traces: RunningJaeger;
  /** "127.0.0.1:PORT", as the agent's events name the apiserver. */
  apiserverAddress: string;
  /** Creates a Widget (generation 1, no status): an operator reconciles it and writes status. */
  createWidget(namespace: string, name: string, spec?: Record<string, unknown>): void;
  /** Changes the Widget's spec (generation + 1): the operator writes status again. */
  bumpWidget(namespace: string, name: string): void;
  /** The Widget's stored status, or undefined. */
  statusOf(namespace: string, name: string): { observedGeneration?: number; phase?: string } | undefined;
  close(): Promise<void>;
}

export async function startTestbedStack(opts: StackOptions): Promise<TestbedStack> {
  const teardown: (() => Promise<void>)[] = [];
  const close = async (): Promise<void> => {
    for (const step of teardown.reverse().splice(0)) {
      try {
        await step();
      } catch (error) {
        console.error("testbed stack teardown step failed:", error);
      }
    }
  };
  try {
    const dir = await mkdtemp(path.join(os.tmpdir(), "lostwrite-stack-"));
    teardown.push(() => rm(dir, { recursive: true, force: true }));
    const traces = await startJaeger();
    teardown.push(() => traces.stop());
    const apiserver = await startApiserver({ dir });
    teardown.push(() => apiserver.close());

    const operators: OperatorProcess[] = [];
    // The agent starts after the operators, so its OTLP port is chosen now
    // (the later --otlp-listen flag wins over the one startAgentProcess adds).
    const otlpPort = await portBelowEphemeralRange();
    for (const [i, operatorOptions] of opts.operators.entries()) {
      const operator = await startOperatorProcess({
        ...operatorOptions,
        kubeconfig: apiserver.kubeconfigPath,
        otlpEndpoint: `http://127.0.0.1:${otlpPort}`,
        serviceName: `widget-operator-${operatorOptions.mode}-${i}`,
      });
      teardown.push(() => operator.stop());
      operators.push(operator);
    }

    const agent = await startAgentProcess(
      [
        ...operators.flatMap((o) => ["--target-pid", String(o.pid)]),
        "--apiserver", `127.0.0.1:${apiserver.port}`,
        "--correlation-window", opts.correlationWindow ?? "3s",
        "--otlp-listen", `127.0.0.1:${otlpPort}`,
        "--otlp-forward", traces.otlpTracesUrl,
        "--node-name", opts.nodeName ?? "e2e-node",
        ...(opts.agentArgs ?? []),
      ],
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: traces.otlpEndpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_BSP_SCHEDULE_DELAY: "100",
        OTEL_SERVICE_NAME: "lostwrite",
      },
    );
    teardown.push(() => agent.stop());

    const resource = WIDGETS;
    const widget = (namespace: string, name: string) => apiserver.store.get(resource, namespace, name);
    return {
      apiserver,
      agent,
      operators,
      traces,
      apiserverAddress: `127.0.0.1:${apiserver.port}`,
      createWidget(namespace, name, spec = { size: 1 }) {
        apiserver.store.commit(resource, {
          apiVersion: "demo.lostwrite.dev/v1",
          kind: "Widget",
          metadata: { name, namespace, generation: 1 },
          spec,
        });
      },
      bumpWidget(namespace, name) {
        const current = widget(namespace, name);
        if (!current) throw new Error(`no Widget ${namespace}/${name}`);
        const spec = (current.spec ?? {}) as Record<string, unknown>;
        apiserver.store.commit(resource, {
          ...current,
          metadata: { ...current.metadata, generation: ((current.metadata.generation) ?? 1) + 1 },
          spec: { ...spec, size: Number(spec.size ?? 0) + 1 },
        });
      },
      statusOf: (namespace, name) => widget(namespace, name)?.status as { observedGeneration?: number; phase?: string } | undefined,
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}
