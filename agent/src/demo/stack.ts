// The demo's running system: the testbed apiserver, the sample operators as
// real child processes (a Node one that swallows status-write errors, one
// that handles them, and — when Go is installed — a Go one in client-go's
// shape that swallows them), a status writer that writes into dead
// connections, and the agent in this process with real probes on all of them.
// Start-up is ordered and whatever started is torn down on failure; close()
// always runs every step, in reverse.
import { spawn, type ChildProcess, type ChildProcessByStdio } from "node:child_process";
import type { Readable } from "node:stream";
import { createWriteStream, type WriteStream } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import { loadConfig } from "../config.ts";
import { startAgent, type RunningAgent } from "../pipeline.ts";
import { createLogger } from "../telemetry/log.ts";
import { startStatusWriter, STATUS_WRITER_NAMESPACE, type StatusWriter } from "./statusWriter.ts";
import { freeLoopbackPort } from "../loopbackPort.ts";
import { buildGoOperator } from "../../../testbed/go-operator/build.ts";
import { goUnavailable } from "../../../testbed/goBuild.ts";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const OPERATOR_MAIN = path.join(repoRoot, "testbed/operator/main.ts");

export const WIDGETS = "demo.lostwrite.dev/v1/widgets";
export const WIDGETS_PER_OPERATOR = 3;

type OperatorMode = "correct" | "swallow";

/** One sample operator, owning one namespace so a fault rule's path picks the operator. */
interface OperatorSpec {
  mode: OperatorMode;
  namespace: string;
  /** The Node operator (testbed/operator) or the Go one (testbed/go-operator: client-go's shape, one HTTP/2 connection). */
  runtime: "node" | "go";
}

export const DEMO_OPERATORS: readonly OperatorSpec[] = [
  { mode: "swallow", namespace: "silent", runtime: "node" },
  { mode: "correct", namespace: "careful", runtime: "node" },
  { mode: "swallow", namespace: "go-silent", runtime: "go" },
];

/** "swallow operator", "Go swallow operator". */
export function operatorLabel(op: Pick<OperatorSpec, "mode" | "runtime">): string {
  return `${op.runtime === "go" ? "Go " : ""}${op.mode} operator`;
}

/** The operators this machine can run: the Go one needs a Go toolchain to be built. */
function demoOperators(): OperatorSpec[] {
  return DEMO_OPERATORS.filter((op) => op.runtime === "node" || goUnavailable() === null);
}

export interface RunningOperator extends OperatorSpec {
  pid: number;
  child: ChildProcess;
}

export interface DemoStack {
  dir: string;
  /** The agent's and the operators' log lines (JSON), kept off the terminal. */
  logPath: string;
  apiserver: Apiserver;
  operators: RunningOperator[];
  /** The third target: a client that writes into dead connections (counted, folded into their death) and sends zero bytes. */
  writer: StatusWriter;
  agent: RunningAgent;
  /** How long building the Go operator took (ms; 0 without one): on a fresh machine Go compiles its standard library first, after that its build cache answers. */
  goBuildMs: number;
  /** Changes a widget's spec (a new generation), so its operator writes status. */
  bumpWidget(namespace: string, name: string): void;
  close(): Promise<void>;
}

interface StackOptions {
  dir: string;
  /** The agent's /metrics and /events address, ADDR:PORT. */
  listen: string;
  record?: string;
  correlationWindowMs: number;
  /** Told when a step of start-up begins, for the screen. */
  onStep?: (text: string) => void;
  /** Aborts start-up (Ctrl-C); what started is torn down. */
  signal?: AbortSignal;
}

export function widgetName(index: number): string {
  return `widget-${index + 1}`;
}

/** Builds and spawns the Go operator; it prints {"ready":true} once it watches. */
async function startGoOperator(spec: OperatorSpec, binary: string, apiserver: Apiserver, otlpPort: number, logFile: WriteStream, signal?: AbortSignal): Promise<RunningOperator> {
  const child = spawn(binary, [
    "--server", apiserver.url, "--namespace", spec.namespace, "--mode", spec.mode, "--family", "xnet",
    "--otlp", `http://127.0.0.1:${otlpPort}`,
  ], { stdio: ["ignore", "pipe", "pipe"] });
  return awaitStarted(spec, child, '"ready":true', logFile, signal);
}

/** Spawns an operator and waits for its "started" line (its informer has listed). */
async function startOperator(spec: OperatorSpec, kubeconfig: string, otlpPort: number, logFile: WriteStream, signal?: AbortSignal): Promise<RunningOperator> {
  const child = spawn(
    process.execPath,
    [
      OPERATOR_MAIN,
      "--kubeconfig", kubeconfig,
      "--mode", spec.mode,
      "--namespace", spec.namespace,
      // One worker: one status write in flight at a time, so one fault hits one request.
      "--workers", "1",
      // The correct operator retries 300 ms after a failure, then 600 ms, ...: one retry
      // falls inside the demo's 700 ms outage, the next one after it.
      "--backoff-base-ms", "300",
    ],
    {
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        ...process.env,
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${otlpPort}`,
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
        OTEL_SERVICE_NAME: `widget-operator-${spec.mode}`,
        OTEL_BSP_SCHEDULE_DELAY: "100",
      },
    },
  );
  return awaitStarted(spec, child, '"msg":"started"', logFile, signal);
}

async function awaitStarted(spec: OperatorSpec, child: ChildProcessByStdio<null, Readable, Readable>, startedText: string, logFile: WriteStream, signal?: AbortSignal): Promise<RunningOperator> {
  const prefix = `operator ${spec.runtime === "go" ? "go " : ""}${spec.mode}: `;
  let buffered = "";
  const started = new Promise<number>((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code, how) => reject(new Error(`the ${spec.mode} operator exited (${how ?? `code ${code}`}) before it started; see ${logFile.path as string}`)));
    signal?.addEventListener("abort", () => reject(new Error("interrupted")), { once: true });
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      logFile.write(chunk.split("\n").filter(Boolean).map((line) => prefix + line + "\n").join(""));
      buffered += chunk;
      if (buffered.includes(startedText)) resolve(child.pid!);
    });
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => logFile.write(prefix + chunk));
  });
  // Generous: on a busy 2-core machine loading the OpenTelemetry SDK alone takes seconds.
  const timeout = setTimeout(() => child.kill("SIGKILL"), 60_000);
  try {
    const pid = await started;
    return { ...spec, pid, child };
  } catch (err) {
    await stopChild(child);
    throw err;
  } finally {
    clearTimeout(timeout);
  }
}

/** The Go probe attaches after the agent is ready (it is compiled per binary). */
async function waitForGoProbe(agent: RunningAgent, signal?: AbortSignal): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const attached = (await agent.metrics.goProbesAttached.get()).values[0]?.value ?? 0;
    if (attached > 0) return;
    if (signal?.aborted === true) throw new Error("interrupted");
    if (Date.now() > deadline) throw new Error("the Go probe did not attach to the Go operator within 30 s");
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 2000);
  await exited;
  clearTimeout(timer);
}

export async function startStack(opts: StackOptions): Promise<DemoStack> {
  const step = opts.onStep ?? (() => undefined);
  const logPath = path.join(opts.dir, "demo.log");
  const logFile = createWriteStream(logPath, { flags: "a" });
  const log = createLogger(logFile);
  const teardown: (() => Promise<void> | void)[] = [];
  const close = async (): Promise<void> => {
    for (const stepFn of teardown.reverse().splice(0)) {
      try {
        await stepFn();
      } catch (err) {
        log.warn("demo teardown step failed", { error: String(err) });
      }
    }
    await new Promise<void>((resolve) => logFile.end(() => resolve()));
  };

  try {
    step("testbed apiserver");
    const apiserver = await startApiserver({ dir: opts.dir });
    teardown.push(() => apiserver.close());
    const specs = demoOperators();
    for (const namespace of [...specs.map((op) => op.namespace), STATUS_WRITER_NAMESPACE]) {
      for (let i = 0; i < WIDGETS_PER_OPERATOR; i++) {
        apiserver.store.commit(WIDGETS, {
          apiVersion: "demo.lostwrite.dev/v1",
          kind: "Widget",
          metadata: { namespace, name: widgetName(i), generation: 1 },
          spec: { size: 1 },
        });
      }
    }

    let goOperator: string | null = null;
    let goBuildMs = 0;
    if (specs.some((spec) => spec.runtime === "go")) {
      step("Go operator build (the first on a machine compiles Go's standard library; cached after)");
      const started = Date.now();
      goOperator = await buildGoOperator(opts.dir, { stripped: true });
      goBuildMs = Date.now() - started;
    }

    step("sample operators");
    const otlpPort = await freeLoopbackPort();
    const operators: RunningOperator[] = [];
    teardown.push(() => Promise.all(operators.map((op) => stopChild(op.child))).then(() => undefined));
    const starting = specs.map((spec) =>
      spec.runtime === "go"
        ? startGoOperator(spec, goOperator!, apiserver, otlpPort, logFile, opts.signal)
        : startOperator(spec, apiserver.kubeconfigPath, otlpPort, logFile, opts.signal));
    // Every one that started is stopped at teardown, also when another failed.
    const settled = await Promise.allSettled(starting);
    for (const outcome of settled) if (outcome.status === "fulfilled") operators.push(outcome.value);
    const failed = settled.find((outcome) => outcome.status === "rejected");
    if (failed !== undefined) throw failed.reason;

    step("status writer");
    const writer = await startStatusWriter({
      dir: opts.dir,
      host: apiserver.host,
      port: apiserver.port,
      path: `/apis/${WIDGETS.replace(/\/widgets$/, "")}/namespaces/${STATUS_WRITER_NAMESPACE}/widgets/${widgetName(0)}/status`,
      logFile,
    });
    teardown.push(() => stopChild(writer.child));

    if (opts.signal?.aborted === true) throw new Error("interrupted");
    step("agent (compiling the bpftrace probe)");
    const config = loadConfig([
      {
        name: "demo",
        values: {
          "target-pid": [...operators.map((op) => op.pid), writer.pid],
          apiserver: [`${apiserver.host}:${apiserver.port}`],
          listen: opts.listen,
          "otlp-listen": `127.0.0.1:${otlpPort}`,
          // The demo's operators send OTLP/HTTP; 4317 may belong to an agent or collector already running.
          "otlp-grpc-listen": "off",
          "correlation-window": `${opts.correlationWindowMs}ms`,
          "node-name": "demo",
          ...(opts.record !== undefined ? { record: opts.record } : {}),
        },
      },
    ]);
    const agent = await startAgent(config, log, { eventLog: null });
    teardown.push(() => agent.close());
    if (operators.some((op) => op.runtime === "go")) {
      step("agent: uprobes on the Go operator's binary");
      await waitForGoProbe(agent, opts.signal);
    }

    const bumpWidget = (namespace: string, name: string): void => {
      const current = apiserver.store.get(WIDGETS, namespace, name);
      if (current === undefined) return;
      const spec = (current as { spec?: { size?: number } }).spec ?? {};
      apiserver.store.commit(WIDGETS, {
        ...current,
        metadata: { ...current.metadata, generation: (current.metadata.generation ?? 1) + 1 },
        spec: { ...spec, size: (spec.size ?? 0) + 1 },
      });
    };
    return { dir: opts.dir, logPath, apiserver, operators, writer, agent, goBuildMs, bumpWidget, close };
  } catch (err) {
    await close();
    throw err;
  }
}
