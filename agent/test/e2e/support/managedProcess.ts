// Runs a real server binary (prometheus, alertmanager) for a test: on a free
// loopback port, with its output kept (bounded) for error messages, and always
// stopped: by stop(), by execa's cleanup when Node exits, and by the kernel
// (setpriv --pdeathsig KILL) even when Node itself is SIGKILLed.
import { rmSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { execa, type ResultPromise } from "execa";
import { locateTool } from "./tools.ts";
import { freeLoopbackPort } from "../../../src/loopbackPort.ts";

export { freeLoopbackPort };


const outputCapacity = 64 * 1024;

export interface ManagedProcess {
  readonly name: string;
  /** The last 64 KiB of stdout and stderr, for error messages. */
  output(): string;
  /** True once the process has exited (for whatever reason). */
  exited(): boolean;
  /** SIGTERM, then SIGKILL after 5 s; resolves when the process is gone. Safe to call twice. */
  stop(): Promise<void>;
}

export function startManagedProcess(name: string, binary: string, args: string[]): ManagedProcess {
  const setpriv = locateTool("setpriv", "util-linux").path;
  const [file, argv] = setpriv ? [setpriv, ["--pdeathsig", "KILL", binary, ...args]] : [binary, args];
  const child: ResultPromise = execa(file, argv, {
    all: true,
    buffer: false,
    reject: false,
    cleanup: true,
    forceKillAfterDelay: 5000,
    stdin: "ignore",
  });
  let output = "";
  child.all?.setEncoding("utf8");
  child.all?.on("data", (chunk: string) => {
    output = (output + chunk).slice(-outputCapacity);
  });
  let done = false;
  const finished = child.then(
    () => {
      done = true;
    },
    () => {
      done = true;
    },
  );
  return {
    name,
    output: () => output,
    exited: () => done,
    async stop() {
      if (!done) child.kill("SIGTERM");
      await finished;
    },
  };
}

/**
 * Polls `url` until it answers 200. Fails early, with the process's output,
 * when the process exits, and after `timeoutMs` otherwise.
 */
export async function waitUntilReady(url: string, process: ManagedProcess, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "no answer yet";
  while (Date.now() < deadline) {
    if (process.exited()) throw new Error(`${process.name} exited before it was ready:\n${process.output()}`);
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(1000) });
      if (response.ok) return;
      last = `HTTP ${response.status}`;
    } catch (error) {
      last = String(error);
    }
    await sleep(100);
  }
  throw new Error(`${process.name} not ready at ${url} after ${timeoutMs} ms (${last}):\n${process.output()}`);
}

/**
 * A Prometheus-family server (prometheus, alertmanager) on 127.0.0.1:`port`,
 * ready when its `/-/ready` answers. `stop()` ends it and removes `dir`, its
 * config and data; a server that never gets ready is stopped before the error.
 */
export async function startReadyServer(
  name: string,
  binary: string,
  args: string[],
  opts: { port: number; dir: string },
): Promise<{ url: string; server: ManagedProcess; stop: () => Promise<void> }> {
  const server = startManagedProcess(name, binary, args);
  const url = `http://127.0.0.1:${opts.port}`;
  const stop = async (): Promise<void> => {
    await server.stop();
    rmSync(opts.dir, { recursive: true, force: true });
  };
  try {
    await waitUntilReady(`${url}/-/ready`, server);
  } catch (error) {
    await stop();
    throw error;
  }
  return { url, server, stop };
}
