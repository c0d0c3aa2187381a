// The kernel smoke suite: what a user's kernel must give the agent, checked
// inside a VM booted on that kernel (testbed/kernels, `npm run test:kernels`),
// and on the host too. `lostwrite doctor`, the probe variant the kernel
// allows, each probe family loading (the socket program, the Go request
// uprobes on the Go operator, the TLS program on python's libssl), and four
// faults end to end. The fault logic is the e2e tests': their python client
// (agent/test/e2e/clients/lw_client.py) and their Go operator faults
// (support/goOperatorFaults.ts). Every verdict is a row, printed as a table
// and, with KERNEL_SMOKE_RESULTS set, written there as JSON for
// docs/kernels.md.
//
// Go is not built inside the VM (under software emulation a build takes
// minutes): KERNEL_SMOKE_GO_OPERATOR names an operator binary built on the host;
// without it the test builds one here, as the e2e tests do. (Not LOSTWRITE_*:
// the agent, which inherits the environment, refuses variables it does not know.)
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import { buildGoOperator } from "../../../testbed/go-operator/build.ts";
import { tracepointAvailable } from "../../src/sources/probe/probeProgram.ts";
import { TLS_TRACEPOINT } from "../../src/sources/tls/tlsProbeProgram.ts";
import { repoPath } from "../repoPath.ts";
import { freePort, startAgentProcess, waitFor, type AgentProcess, type LogLine } from "../e2e/support/agentProcess.ts";
import { goOperatorFaults, type GoOperatorFaults } from "../e2e/support/goOperatorFaults.ts";
import { runLwClient, watchedBy, type ClientStep } from "../e2e/support/lwClient.ts";
import { resetOnMarkerServer, tlsResetServer } from "../e2e/support/resetServers.ts";
import { assertKernelRequirements, skipWithoutKernel } from "../e2e/support/kernelRequirements.ts";
import { kernelResultsTable, type KernelResults } from "./results.ts";

const NODE = repoPath("node_modules/.bin/node");

const portOf = (server: net.Server): number => (server.address() as net.AddressInfo).port;


/** Under software emulation everything is 10-50x slower than on the host: waits are generous. */
const EVENT_WAIT_MS = 60_000;
/** A Go program's compile and the kernel's check of its loops: bpftrace alone took 35 s to attach on 5.10 under emulation. */
const GO_FOLLOW_WAIT_MS = 180_000;
/** The agent's start compiles its socket program with bpftrace: about a minute under emulation, more on 5.10. */
const AGENT_READY_MS = 300_000;

/** `lostwrite doctor`, as a user runs it. */
function runDoctor(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(NODE, [repoPath("agent/src/cli.ts"), "doctor"], { stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (output += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (output += chunk));
    child.once("error", reject);
    child.once("exit", (code) => resolve({ code, output }));
  });
}

describe("kernel smoke: doctor, probe families, faults end to end", { skip: skipWithoutKernel(), timeout: 900_000 }, () => {
  let dir: string;
  let agent: AgentProcess;
  let agentLog: LogLine[];
  let api: Apiserver;
  let faults: GoOperatorFaults;
  let goOperator: string;
  let lwClient: string;
  let tlsServer: net.Server;
  let plainServer: net.Server;
  let refusedPort: number;
  let doctor: { code: number | null; output: string };
  const results: KernelResults = { kernel: os.release(), variant: null, doctor: [], families: [], faults: [] };

  /** Runs lw_client.py as lw-client once the agent follows it, and `beforeGo` then. */
  function runClient(mode: string, port: number, beforeGo: (pid: number) => Promise<unknown> = async () => {}): Promise<ClientStep[]> {
    return runLwClient(lwClient, mode, port, async (pid) => {
      await watchedBy(agent, "lw-client", pid, EVENT_WAIT_MS);
      await beforeGo(pid);
    });
  }

  /** Records a fault's row whatever happens, then asserts: a table with a failed row says more than a stack trace. */
  async function fault(name: string, expected: string, detect: () => Promise<string>): Promise<void> {
    let detected: string;
    try {
      detected = await detect();
    } catch (err) {
      detected = `none (${(err as Error).message.split("\n")[0]})`;
    }
    results.faults.push({ fault: name, expected, detected });
    assert.equal(detected, expected);
  }

  before(async () => {
    assertKernelRequirements();
    // First, so that its checks are in the results even when the agent then fails to start.
    doctor = await runDoctor();
    results.doctor = doctor.output.split("\n").filter((line) => /^(ok|FAIL) /.test(line)).map((line) => line.replace(/\s+/, " "));
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-kernel-smoke-"));
    goOperator = process.env.KERNEL_SMOKE_GO_OPERATOR ?? (await buildGoOperator(dir, { stripped: true }));
    // The kernel's comm is the name the binary was exec'd under: a symlink names the client.
    const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
    lwClient = path.join(dir, "lw-client");
    symlinkSync(python, lwClient);
    tlsServer = await tlsResetServer(path.join(dir, "certs"));
    plainServer = await resetOnMarkerServer();
    refusedPort = await freePort();
    api = await startApiserver({ dir: path.join(dir, "apiserver") });
    agent = await startAgentProcess([
      "--target-comm", "^(lw-client|go-operator)$",
      "--apiserver", `127.0.0.1:${portOf(tlsServer)}`,
      "--apiserver", `127.0.0.1:${portOf(plainServer)}`,
      "--apiserver", `127.0.0.1:${refusedPort}`,
      "--apiserver", `127.0.0.1:${api.port}`,
      "--correlation-window", "2s",
      "--span-grace", "0s",
    ], {}, { readyTimeoutMs: AGENT_READY_MS });
    agentLog = agent.log;
    faults = goOperatorFaults(api, agent, agentLog, { followTimeoutMs: GO_FOLLOW_WAIT_MS });
  });

  after(async () => {
    // What the agent said of its programs: on a kernel where one fails, the reason is here.
    const programLines = (agent?.stderr ?? []).filter((line) => /probe|program|bpftrace|"level":"(warn|error)"/i.test(line) && !line.includes("boundary"));
    console.log(`agent log, its programs:\n${programLines.slice(-60).join("\n")}\n`);
    console.log(kernelResultsTable(results));
    if (process.env.KERNEL_SMOKE_RESULTS) writeFileSync(process.env.KERNEL_SMOKE_RESULTS, JSON.stringify(results, null, 2));
    await agent?.stop();
    await api?.close();
    tlsServer?.close();
    plainServer?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("lostwrite doctor passes, and names the variant the kernel allows", () => {
    const expected = tracepointAvailable("sock/sock_send_length") ? "sockets" : "syscalls";
    assert.equal(doctor.code, 0, doctor.output);
    assert.match(doctor.output, new RegExp(`the agent will load "${expected}"`), doctor.output);
  });

  it("loads the socket program in the variant the kernel allows", () => {
    // Logged before the agent is ready: its log holds every line since it started.
    const chosen = agent.log.find((line) => line.msg === "probe variant chosen");
    results.variant = (chosen?.variant as string | undefined) ?? null;
    results.families.push({ family: `socket program (${results.variant})`, loaded: results.variant !== null });
    assert.equal(results.variant, tracepointAvailable("sock/sock_send_length") ? "sockets" : "syscalls");
  });

  it("failed write: sendto into a reset plain connection", async () => {
    await fault("failed write (sendto after RST)", "write_failed ECONNRESET", async () => {
      const steps = await runClient("plain_reset", portOf(plainServer));
      assert.ok(steps.some((s) => s.step === "sendto_after_reset" && s.errno), JSON.stringify(steps));
      const mine = (): typeof agent.events => agent.events.filter((e) => e.apiserver === `127.0.0.1:${portOf(plainServer)}`);
      await waitFor("the write_failed event", () => mine().length > 0, EVENT_WAIT_MS);
      return mine().map((e) => `${e.cause} ${e.errno}`).join(", ");
    });
  });

  it("connection reset with a status request unanswered, over python's TLS: by the TLS program on its libssl where the kernel allows it (6.3+), else by the socket path", async () => {
    const family = "TLS program (python's libssl)";
    const mine = (): typeof agent.events => agent.events.filter((e) => e.apiserver === `127.0.0.1:${portOf(tlsServer)}`);
    if (!tracepointAvailable(TLS_TRACEPOINT)) {
      // The program ties an SSL to its socket on a tracepoint this kernel lacks:
      // the agent says so once and never starts it; the reset is the wire's.
      const warned = agent.log.some((line) => line.level === "warn" && /TLS answers need/.test(String(line.msg)));
      results.families.push({ family, loaded: false, notStarted: `the kernel lacks ${TLS_TRACEPOINT.replace("/", ":")}` });
      assert.ok(warned, "the agent warns that TLS answers need the tracepoint");
      await fault("connection reset, request unanswered (python TLS, socket path)", "connection_reset", async () => {
        await runClient("tls_reset", portOf(tlsServer));
        await waitFor("the connection_reset event", () => mine().length > 0, EVENT_WAIT_MS);
        return mine().map((e) => e.cause).join(", ");
      });
      assert.ok(!agent.log.some((line) => typeof line.msg === "string" && line.msg.startsWith("TLS probe")), "no TLS program started");
      return;
    }
    // The client maps libssl at its start and waits for "go": the agent's TLS program attaches meanwhile.
    // A pid known when the program attaches is in its "attached" line; one added later gets a "follows" line.
    const tlsFollows = (pid: number): boolean =>
      agent.log.some((line) =>
        (line.msg === "TLS probe follows" && line.pid === pid) || (line.msg === "TLS probe attached" && (line.pids as number[]).includes(pid)));
    let followed = false;
    try {
      await fault("connection reset, request unanswered (python TLS)", "connection_reset", async () => {
        await runClient("tls_reset", portOf(tlsServer), async (pid) => {
          await waitFor(`the TLS program to follow lw-client[${pid}]`, () => tlsFollows(pid), EVENT_WAIT_MS);
          followed = true;
        });
        await waitFor("the connection_reset event", () => mine().length > 0, EVENT_WAIT_MS);
        return mine().map((e) => e.cause).join(", ");
      });
    } finally {
      results.families.push({ family, loaded: followed });
    }
  });

  it("refused connect", async () => {
    await fault("refused connect", "connect_failed ECONNREFUSED", async () => {
      await runClient("refused", refusedPort);
      const mine = (): typeof agent.events => agent.events.filter((e) => e.apiserver === `127.0.0.1:${refusedPort}`);
      await waitFor("the connect_failed event", () => mine().length > 0, EVENT_WAIT_MS);
      return mine().map((e) => `${e.cause} ${e.errno}`).join(", ");
    });
  });

  it("Go operator: a reset status PATCH, identified by its path from the Go request uprobes", async () => {
    // startOperator returns once the agent logged that a Go program follows the operator.
    let attached = false;
    try {
      await fault("Go operator, status PATCH reset", "connection_reset PATCH by path", async () => {
        const op = await faults.startOperator(goOperator, "xnet", "go-smoke");
        attached = true;
        try {
          const write = faults.statusWrite(op, { action: "reset" });
          await waitFor(`the loss of ${write.path}`, () => faults.eventsFor(write.path).length > 0, EVENT_WAIT_MS);
          return faults.eventsFor(write.path).map((e) => `${e.cause} ${e.request?.method} ${e.request?.path === write.path ? "by path" : e.request?.path}`).join(", ");
        } finally {
          await op.stop();
        }
      });
    } finally {
      results.families.push({ family: "Go request uprobes (go-operator, x/net/http2)", loaded: attached });
    }
  });
});
