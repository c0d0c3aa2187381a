// One run of the real agent CLI for a benchmark phase: started as a user
// starts it, ready when /readyz says the probe is attached, stopped with
// SIGTERM, and gone only when its bpftrace is gone too (the probes stay
// attached until that process exits, and would bleed into the next phase).
import { spawn, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { freeLoopbackPort as freePort } from "../src/loopbackPort.ts";
import type { ToolRun } from "./toolRun.ts";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const READY_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 10_000;
/** USER_HZ: /proc reports CPU time in these ticks; 100 on every Linux architecture Node supports. */
const CLOCK_TICKS_PER_SECOND = 100;


/** Pids of every descendant of `pid`, from /proc/PID/task/TID/children. */
export function descendants(pid: number): number[] {
  const found: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    const parent = queue.shift()!;
    let tasks: string[];
    try {
      tasks = readdirSync(`/proc/${parent}/task`);
    } catch {
      continue; // exited meanwhile
    }
    for (const tid of tasks) {
      let children = "";
      try {
        children = readFileSync(`/proc/${parent}/task/${tid}/children`, "utf8");
      } catch {
        continue;
      }
      for (const child of children.split(" ").filter(Boolean).map(Number)) {
        found.push(child);
        queue.push(child);
      }
    }
  }
  return found;
}

/** The comm of a live (not zombie) process, or null. */
export function liveComm(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // comm is in parentheses and may hold spaces; the state follows the last ")".
    const close = stat.lastIndexOf(")");
    if (stat.slice(close + 2, close + 3) === "Z") return null;
    return stat.slice(stat.indexOf("(") + 1, close);
  } catch {
    return null;
  }
}

/** bpftrace invocations that attach nothing: dry runs, listings, version and feature queries. */
const NON_ATTACHING = new Set(["-d", "--dry-run", "-dd", "-l", "--version", "-V", "--info"]);

/** Every live bpftrace process on the machine that may have probes attached. */
export function attachedBpftracePids(): number[] {
  return readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name))
    .map(Number)
    .filter((pid) => {
      if (liveComm(pid) !== "bpftrace") return false;
      try {
        const args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
        return !args.some((arg) => NON_ATTACHING.has(arg));
      } catch {
        return false;
      }
    });
}

/** CPU seconds (user + system) a process has used so far, 0 once it is gone. */
export function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the comm's closing ")": state is field 3, utime 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}

interface AgentRun extends ToolRun {
  child: ChildProcess;
  /** bpftrace processes the agent runs now (also after a restart). */
  bpftrace(): number[];
  /** Sum of lostwrite_apiserver_writes_total: the target's sends the probe counted. */
  countedWrites(): Promise<number>;
  /** Sum of lostwrite_probe_restarts_total. */
  restarts(): Promise<number>;
  /** CPU seconds used so far by the agent and the processes it started (bpftrace). */
  cpuSeconds(): number;
  stop(): Promise<void>;
}

export async function startAgentRun(opts: { targetPid: number; apiserver: string; variant: string }): Promise<AgentRun> {
  const port = await freePort();
  const otlpPort = await freePort();
  const child = spawn(
    path.join(repoRoot, "node_modules/.bin/node"),
    [
      path.join(repoRoot, "agent/src/cli.ts"), "agent",
      "--target-pid", String(opts.targetPid),
      "--apiserver", opts.apiserver,
      "--listen", `127.0.0.1:${port}`,
      "--otlp-listen", `127.0.0.1:${otlpPort}`,
      "--otlp-grpc-listen", "off",
      "--probe-variant", opts.variant,
    ],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr = (stderr + chunk).slice(-4000)));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const url = `http://127.0.0.1:${port}`;

  let bpftrace: number[] = [];
  const stop = async (): Promise<void> => {
    // Remember bpftrace now: once the agent is gone it is no longer its child.
    const watched = [...new Set([...bpftrace, ...descendants(child.pid ?? -1).filter((pid) => liveComm(pid) === "bpftrace")])];
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      for (const pid of watched) killQuietly(pid);
    }, STOP_TIMEOUT_MS);
    await exited;
    const deadline = Date.now() + STOP_TIMEOUT_MS;
    while (watched.some((pid) => liveComm(pid) === "bpftrace")) {
      if (Date.now() > deadline) for (const pid of watched) killQuietly(pid);
      await sleep(50);
    }
    clearTimeout(timer);
  };

  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`agent (--probe-variant ${opts.variant}) exited (${child.signalCode ?? child.exitCode}): ${stderr.trim()}`);
    }
    try {
      if ((await fetch(`${url}/readyz`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`agent (--probe-variant ${opts.variant}) not ready after ${READY_TIMEOUT_MS / 1000} s: ${stderr.trim()}`);
    }
    await sleep(100);
  }
  bpftrace = descendants(child.pid!).filter((pid) => liveComm(pid) === "bpftrace");

  return {
    child,
    bpftrace: () => [...new Set([...bpftrace, ...descendants(child.pid!)])].filter((pid) => liveComm(pid) === "bpftrace"),
    countedWrites: () => metricSum(url, "lostwrite_apiserver_writes_total"),
    restarts: () => metricSum(url, "lostwrite_probe_restarts_total"),
    cpuSeconds: () => [child.pid!, ...descendants(child.pid!)].reduce((sum, pid) => sum + cpuSeconds(pid), 0),
    stop,
  };
}

/** The sum of every sample of `name` on the agent's /metrics. */
async function metricSum(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) sum += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return sum;
}

/** SIGKILL for a bpftrace we started, unless that pid is no longer a bpftrace. */
function killQuietly(pid: number): void {
  if (liveComm(pid) !== "bpftrace") return;
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // already gone
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
