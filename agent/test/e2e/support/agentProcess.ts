// Runs the real agent CLI as a child process, as a user would, and reads
// what it exposes: /metrics, /readyz and its stdout event log. It listens on
// ports the kernel picks as it binds (port 0), read back from its "agent
// ready" log line: a port picked here and bound later could be taken in
// between by any connect on the machine.
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { LossEvent } from "../../../src/model.ts";
import { freeLoopbackPort } from "../../../src/loopbackPort.ts";

export { freeLoopbackPort as freePort };

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");


export interface AgentProcess {
  child: ChildProcess;
  url: string;
  otlpPort: number;
  otlpGrpcPort: number;
  events: LossEvent[];
  stderr: string[];
  /** Its JSON log lines (stderr), every one since it started: a line logged while it was getting ready is in it too. */
  log: LogLine[];
  metrics(): Promise<Map<string, number>>;
  metric(name: string, labels?: Record<string, string>): Promise<number>;
  stop(): Promise<void>;
}

/** Sample lines of the text exposition, keyed `name{a="b",...}` exactly as printed. */
export function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const i = line.lastIndexOf(" ");
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}

/** Sum of the samples of `name` whose labels include all of `labels`. */
export function sumMetric(samples: Map<string, number>, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const [key, value] of samples) {
    const brace = key.indexOf("{");
    const metricName = brace === -1 ? key : key.slice(0, brace);
    if (metricName !== name) continue;
    if (Object.entries(labels).every(([k, v]) => key.includes(`${k}="${v}"`))) sum += value;
  }
  return sum;
}

/** Where the agent listens, as its "agent ready" log line says. */
interface ReadyLine {
  listen: { port: number };
  otlp: { port: number };
  otlpGrpc: { port: number } | null;
}

export interface StartAgentOptions {
  /** Runs the agent's command line inside something else (the deployed shape): returns the command to spawn. */
  wrap?: (argv: string[]) => string[];
  /** How long the agent may take to be ready (default 90 s; a VM under software emulation needs more). */
  readyTimeoutMs?: number;
}

/**
 * The environment an agent started by a test runs with: the test's own, less
 * the tests' switches (LOSTWRITE_E2E_DEBUG), which the agent would refuse as
 * LOSTWRITE_* variables that name no setting; then `extra`.
 */
export function agentEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("LOSTWRITE_E2E_")));
  return { ...inherited, ...extra };
}

export async function startAgentProcess(args: string[], env: NodeJS.ProcessEnv = {}, options: StartAgentOptions = {}): Promise<AgentProcess> {
  const node = path.join(repoRoot, "node_modules/.bin/node");
  const argv = [node, path.join(repoRoot, "agent/src/cli.ts"), "agent", "--listen", "127.0.0.1:0", "--otlp-listen", "127.0.0.1:0", "--otlp-grpc-listen", "127.0.0.1:0", ...args];
  const [command, ...commandArgs] = options.wrap ? options.wrap(argv) : argv;
  const child = spawn(command!, commandArgs, { stdio: ["ignore", "pipe", "pipe"], env: agentEnv(env) });
  const events: LossEvent[] = [];
  const stderr: string[] = [];
  const log: LogLine[] = [];
  let buffered = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    buffered += chunk;
    let nl: number;
    while ((nl = buffered.indexOf("\n")) !== -1) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      if (line.trim()) events.push(JSON.parse(line) as LossEvent);
    }
  });
  // An object, so that the loop below sees what the listener sets.
  const announced: { ready: ReadyLine | null } = { ready: null };
  let partial = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    stderr.push(...chunk.split("\n").filter(Boolean));
    partial += chunk;
    let nl: number;
    while ((nl = partial.indexOf("\n")) !== -1) {
      const text = partial.slice(0, nl);
      partial = partial.slice(nl + 1);
      const line = logLine(text);
      if (line === null) continue;
      log.push(line);
      if (announced.ready === null && line.msg === "agent ready") announced.ready = line as unknown as ReadyLine;
    }
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const readyTimeoutMs = options.readyTimeoutMs ?? 90_000;
  const deadline = Date.now() + readyTimeoutMs;
  let ready: ReadyLine;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`agent exited with ${child.exitCode}: ${stderr.join("\n")}`);
    if (announced.ready !== null) {
      ready = announced.ready;
      try {
        // The ready line comes once every stage started; /readyz may still wait for the probe.
        const res = await fetch(`http://127.0.0.1:${ready.listen.port}/readyz`);
        if (res.ok) break;
      } catch {
        // not answering yet
      }
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`agent not ready after ${readyTimeoutMs / 1000} s: ${stderr.join("\n")}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  const url = `http://127.0.0.1:${ready.listen.port}`;
  const metrics = async (): Promise<Map<string, number>> => parseMetrics(await (await fetch(`${url}/metrics`)).text());
  const { otlp, otlpGrpc } = ready;
  return {
    child,
    url,
    otlpPort: otlp.port,
    otlpGrpcPort: otlpGrpc?.port ?? 0,
    events,
    stderr,
    log,
    metrics,
    metric: async (name, labels) => sumMetric(await metrics(), name, labels),
    stop: async () => {
      if (child.exitCode === null) child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Polls until `check` returns true; returns the ms it took, throws after timeoutMs. */
export async function waitFor(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<number> {
  const start = Date.now();
  for (;;) {
    if (await check()) return Date.now() - start;
    if (Date.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface LogLine {
  msg: string;
  [field: string]: unknown;
}

/** One of the agent's JSON log lines; null for any other text on its stderr (bpftrace's warnings). */
function logLine(text: string): LogLine | null {
  try {
    const parsed: unknown = JSON.parse(text);
    return typeof parsed === "object" && parsed !== null && "msg" in parsed ? (parsed as LogLine) : null;
  } catch {
    return null;
  }
}
