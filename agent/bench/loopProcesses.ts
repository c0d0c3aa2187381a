// The C loops of the benchmark (probeCostLoop.c) as child processes that
// answer one line per request: compiled once per run into a temp dir, started
// once, then asked for a timed run per round.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

const SOURCE = path.join(path.dirname(fileURLToPath(import.meta.url)), "probeCostLoop.c");

/** The cost of one operation in ns: as the caller waits it (wall) and as its thread spent CPU on it. */
interface OpCost {
  wallNs: number;
  cpuNs: number;
}

/** The server's reader of a send loop's connection, over one timed run: CPU ns per recv(), context switches per 1000 recv(). */
export interface ReaderCost {
  cpuNs: number;
  /** It blocked in recv() for want of data: 1000 / this is the messages it found queued per wake-up. */
  voluntaryPer1000: number;
  /** It was preempted. */
  involuntaryPer1000: number;
}

/** Compiles probeCostLoop.c into `dir`; returns the binary's path. */
export function compileLoops(dir: string): string {
  const binary = path.join(dir, "probeCostLoop");
  execFileSync("gcc", ["-O2", "-Wall", "-Wextra", "-Werror", "-o", binary, SOURCE], { stdio: ["ignore", "ignore", "pipe"] });
  return binary;
}

/** A child that speaks in lines: each `request` writes one line and resolves with the next line it prints. */
export class LineProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly #name: string;
  readonly #lines: string[] = [];
  readonly #waiting: { resolve: (line: string) => void; reject: (err: Error) => void }[] = [];
  #buffered = "";
  #stderr = "";
  #exited: string | null = null;

  constructor(name: string, binary: string, args: string[]) {
    this.#name = name;
    this.child = spawn(binary, args, { stdio: ["pipe", "pipe", "pipe"] });
    if (this.child.pid === undefined) throw new Error(`${name}: could not start ${binary}`);
    this.pid = this.child.pid;
    this.child.stdout!.setEncoding("utf8").on("data", (chunk: string) => this.#onData(chunk));
    this.child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (this.#stderr = (this.#stderr + chunk).slice(-2000)));
    this.child.stdin!.on("error", () => undefined); // a dead child is reported by the exit handler
    this.child.once("exit", (code, signal) => {
      this.#exited = `${this.#name} exited (${signal ?? code})${this.#stderr ? `: ${this.#stderr.trim()}` : ""}`;
      for (const w of this.#waiting.splice(0)) w.reject(new Error(this.#exited));
    });
  }

  #onData(chunk: string): void {
    this.#buffered += chunk;
    let nl: number;
    while ((nl = this.#buffered.indexOf("\n")) !== -1) {
      const line = this.#buffered.slice(0, nl);
      this.#buffered = this.#buffered.slice(nl + 1);
      const waiter = this.#waiting.shift();
      if (waiter) waiter.resolve(line);
      else this.#lines.push(line);
    }
  }

  /** The next line printed (already printed or yet to come). */
  nextLine(): Promise<string> {
    const line = this.#lines.shift();
    if (line !== undefined) return Promise.resolve(line);
    if (this.#exited) return Promise.reject(new Error(this.#exited));
    return new Promise((resolve, reject) => this.#waiting.push({ resolve, reject }));
  }

  request(line: string): Promise<string> {
    this.child.stdin!.write(`${line}\n`);
    return this.nextLine();
  }

  kill(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
  }
}

/** The stand-in apiserver: one forked reader per connection; resolves once it listens. */
export async function startServer(binary: string, cpu: number): Promise<{ process: LineProcess; port: number }> {
  const process = new LineProcess("server", binary, ["server", String(cpu)]);
  const line = await process.nextLine();
  const match = /^listening (\d+)$/.exec(line);
  if (!match) throw new Error(`server: expected "listening PORT", got ${JSON.stringify(line)}`);
  return { process, port: Number(match[1]) };
}

/** A socket-send loop, connected to the server once it resolves. */
export class SendLoop {
  readonly process: LineProcess;
  constructor(name: string, binary: string, port: number, cpu: number) {
    this.process = new LineProcess(name, binary, ["send", String(port), String(cpu)]);
  }
  async ready(): Promise<void> {
    const line = await this.process.nextLine();
    if (line !== "ready") throw new Error(`send loop: expected "ready", got ${JSON.stringify(line)}`);
  }
  /** ns per send() by the wall clock and the sender's CPU clock; the reader's CPU ns and context switches for the same messages. */
  async run(iterations: number): Promise<{ send: OpCost; recv: ReaderCost }> {
    const line = await this.process.request(String(iterations));
    const [wallNs, cpuNs, recvCpuNs, voluntary, involuntary] = numbers(line, 5, "send loop");
    return { send: { wallNs: wallNs!, cpuNs: cpuNs! }, recv: { cpuNs: recvCpuNs!, voluntaryPer1000: voluntary!, involuntaryPer1000: involuntary! } };
  }
}

/** A file-write loop on `file`. */
export class FileLoop {
  readonly process: LineProcess;
  constructor(binary: string, file: string, cpu: number) {
    this.process = new LineProcess("file loop", binary, ["file", file, String(cpu)]);
  }
  async ready(): Promise<void> {
    const line = await this.process.nextLine();
    if (line !== "ready") throw new Error(`file loop: expected "ready", got ${JSON.stringify(line)}`);
  }
  /** ns per write() by the wall clock and the writer's CPU clock. */
  async run(iterations: number): Promise<OpCost> {
    const [wallNs, cpuNs] = numbers(await this.process.request(String(iterations)), 2, "file loop");
    return { wallNs: wallNs!, cpuNs: cpuNs! };
  }
}

function numbers(line: string, count: number, who: string): number[] {
  const values = line.split(" ").map(Number);
  if (values.length !== count || !values.every(Number.isFinite)) throw new Error(`${who}: unexpected answer ${JSON.stringify(line)}`);
  return values;
}
