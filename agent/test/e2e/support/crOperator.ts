// The controller-runtime operator (testbed/cr-operator) as the e2e tests on
// the real control plane run it: one process per namespace, its spans sent to
// the agent, started once its cache has synced and the agent's Go probe
// follows it. Shared by realControlPlane (its faults) and
// realControlPlaneSoak (ten minutes of reconciling without one).
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { waitFor, type LogLine } from "./agentProcess.ts";
import { loggedFor } from "./goOperatorFaults.ts";

/** `careful` returns a failed write's error (controller-runtime requeues it); `silent` logs it and reports success. */
export type CrOperatorMode = "careful" | "silent";

export interface CrOperator {
  mode: CrOperatorMode;
  child: ChildProcess;
  pid: number;
  namespace: string;
  /** What it wrote on stderr: controller-runtime's JSON log lines, in chunks. */
  stderr: string[];
  stop(): Promise<void>;
}

export interface CrOperatorOptions {
  binary: string;
  kubeconfigPath: string;
  mode: CrOperatorMode;
  namespace: string;
  /** Where its OTLP exporter sends spans: the agent's OTLP/HTTP port. */
  otlpPort: number;
  /** The agent's log, to wait until its Go probe follows the operator. */
  agentLog: LogLine[];
  /** More environment (client-go's HTTP/2 health check, read from it). */
  env?: Record<string, string>;
}

/**
 * The agent's --target-cmdline for the operators run with `kubeconfigPath`:
 * this test's, in the control plane's own directory, and no other test's
 * cr-operator on the same machine (whose faults and losses are not this
 * test's to count).
 */
export function operatorCmdline(kubeconfigPath: string): string {
  return `--kubeconfig ${kubeconfigPath.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} `;
}

/** Starts the operator with Status().Update() writes; resolves once its cache synced and the Go probe follows it. */
export async function startCrOperator(o: CrOperatorOptions): Promise<CrOperator> {
  const child = spawn(o.binary, [
    "--kubeconfig", o.kubeconfigPath, "--namespace", o.namespace, "--status-write", "update", ...(o.mode === "silent" ? ["--swallow"] : []),
  ], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${o.otlpPort}`, ...o.env },
  });
  const pid = child.pid!;
  let stdout = "";
  const stderr: string[] = [];
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => stderr.push(chunk));
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await new Promise((resolve) => child.once("exit", resolve));
    }
  };
  try {
    await waitFor(`the ${o.mode} operator [${pid}] to sync its cache`, () => stdout.includes('"ready":true') || child.exitCode !== null, 60_000);
    assert.equal(child.exitCode, null, `the operator runs: ${stderr.join("")}`);
    await waitFor(`the Go probe to follow the operator [${pid}]`, () => loggedFor(o.agentLog, "Go probe follows", pid), 30_000);
  } catch (error) {
    await stop();
    throw error;
  }
  return { mode: o.mode, child, pid, namespace: o.namespace, stderr, stop };
}
