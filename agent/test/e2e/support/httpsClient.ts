// A python3 HTTPS client process (clients/lw_https_client.py) driven one
// command at a time over stdin: connect, request, request_retransmitted (the
// first transmission withheld with TCP repair mode, so the kernel really
// retransmits on loopback), close, exit. Each command answers one JSON line.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { waitFor, type AgentProcess } from "./agentProcess.ts";

const CLIENT = path.join(path.dirname(fileURLToPath(import.meta.url)), "../clients/lw_https_client.py");

export interface Step {
  step: string;
  t: number;
  local?: string;
  tls?: string;
  cipher?: string;
  unread?: number;
  status?: number | null;
  /** The answer's body (`span`). */
  text?: string;
  sent?: number;
  records?: number;
  elapsed_ms?: number;
  error?: string;
  errno?: number | null;
  readable?: boolean;
  read?: number;
}

/** One python3 HTTPS client process, driven one command at a time over stdin. */
export class HttpsClient {
  readonly comm: string;
  readonly child: ChildProcess;
  private readonly steps: Step[] = [];
  private readonly exited: Promise<number | null>;
  private buffered = "";

  constructor(binary: string, port: number, timeoutS: number) {
    this.comm = path.basename(binary);
    this.child = spawn(binary, [CLIENT, "127.0.0.1", String(port), String(timeoutS)], { stdio: ["pipe", "pipe", "inherit"] });
    this.child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      this.buffered += chunk;
      let nl: number;
      while ((nl = this.buffered.indexOf("\n")) !== -1) {
        this.steps.push(JSON.parse(this.buffered.slice(0, nl)) as Step);
        this.buffered = this.buffered.slice(nl + 1);
      }
    });
    this.exited = new Promise((resolve) => this.child.once("exit", (code) => resolve(code)));
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Resolves once the agent has logged this process as a target: from then on the probe sees its sockets. */
  async watchedBy(agent: AgentProcess): Promise<void> {
    const name = `${this.comm}[${this.pid}]`;
    await waitFor(`the agent to watch ${name}`, () => agent.stderr.some((line) => line.includes(name)), 5000);
  }

  /** Waits until a TLS program follows this client's OpenSSL, as one does a client that has lived for a while. */
  async tlsFollowedBy(agent: AgentProcess): Promise<void> {
    const attached = (line: string): boolean => {
      try {
        const entry = JSON.parse(line) as { msg?: string; pid?: unknown };
        return entry.msg === "TLS probe follows" && entry.pid === this.pid;
      } catch {
        return false;
      }
    };
    await waitFor(`a TLS program to follow ${this.comm}[${this.pid}]`, () => agent.stderr.some(attached), 20_000);
  }

  async run(command: string, timeoutMs = 10_000): Promise<Step> {
    const before = this.steps.length;
    this.child.stdin!.write(command + "\n");
    await waitFor(`client ${this.comm} to answer "${command}"`, () => this.steps.length > before, timeoutMs);
    return this.steps[before]!;
  }

  async exit(): Promise<void> {
    this.child.stdin!.end("exit\n");
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 5000);
    await this.exited;
    clearTimeout(timer);
  }
}

/**
 * Clients under comms of the test's choosing: a symlink to python3 named so
 * gives the process that comm in the kernel, so an agent can target exactly
 * them by name and tell their events apart.
 */
export class NamedClients {
  private readonly dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-clients-"));
  private readonly python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
  private readonly clients: HttpsClient[] = [];
  private readonly port: number;
  private readonly timeoutS: number;

  constructor(port: number, timeoutS: number) {
    this.port = port;
    this.timeoutS = timeoutS;
  }

  client(comm: string, timeoutS = this.timeoutS): HttpsClient {
    const binary = path.join(this.dir, comm);
    symlinkSync(this.python, binary);
    const c = new HttpsClient(binary, this.port, timeoutS);
    this.clients.push(c);
    return c;
  }

  close(): void {
    for (const c of this.clients) c.child.kill("SIGKILL");
    rmSync(this.dir, { recursive: true, force: true });
  }
}
