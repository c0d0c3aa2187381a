// lw_client.py, the e2e tests' fault client: a python process, run under a
// chosen comm (a symlink to the python binary), that waits for "go" on its
// stdin, makes one fault of the given mode against host:port, and prints one
// JSON line per step.
import { spawn } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { waitFor } from "./agentProcess.ts";

export const LW_CLIENT = path.join(path.dirname(fileURLToPath(import.meta.url)), "../clients/lw_client.py");

export interface ClientStep {
  step: string;
  errno: string | null;
  t?: number;
  /** Bytes the step's sends queued, where the client reports them. */
  sent?: number;
}

/**
 * Runs the client as `binary` and tells it to act once `ready(pid)` resolves
 * (the agent follows it, a program attached: whatever the test waits for);
 * resolves to its steps, and fails when it exits with an error.
 */
export async function runLwClient(binary: string, mode: string, port: number, ready: (pid: number) => Promise<unknown>, host = "127.0.0.1"): Promise<ClientStep[]> {
  const child = spawn(binary, [LW_CLIENT, mode, host, String(port)], { stdio: ["pipe", "pipe", "inherit"] });
  let out = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
  const exited = new Promise<number | null>((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code) => resolve(code));
  });
  try {
    await ready(child.pid!);
    child.stdin.end("go\n");
  } catch (err) {
    child.kill("SIGKILL");
    throw err;
  }
  const code = await exited;
  if (code !== 0) throw new Error(`client ${mode} exited ${code}: ${out}`);
  return out.split("\n").filter(Boolean).map((line) => JSON.parse(line) as ClientStep);
}

/** Resolves when the agent has logged `comm[pid]`: it logs every target it adds, by comm and pid. */
export async function watchedBy(agent: { stderr: readonly string[] }, comm: string, pid: number, timeoutMs: number): Promise<void> {
  const watched = `${comm}[${pid}]`;
  await waitFor(`the agent to watch ${watched}`, () => agent.stderr.some((line) => line.includes(watched)), timeoutMs);
}
