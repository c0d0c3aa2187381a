// The socket probe's program on sock:sock_send_length runs at every send of
// every process on the node. On the real kernel, with bpftrace's attachments
// read from the kernel (bpftool perf show): once every target is a Go
// operator its Go probe follows per request and no rule can add a target,
// the socket probe is restarted without it, the operator's lost status write
// is still reported, and its connection, older than that socket probe, still
// followed (the Go probe found its socket); once a target needs the hook (its
// Go program gone), the socket probe is restarted with it, and without it
// again once the Go program follows the operator again. With a rule that can
// match a program started later, the hook stays, and a short-lived client
// started at once, which no bpftrace could attach for in time, has its lost
// write reported; with --send-hook targets it goes all the same, and comes
// back for a program the rule matches later.
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync } from "node:fs";
import type net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import { buildGoOperator } from "../../../testbed/go-operator/build.ts";
import { goUnavailable } from "../../../testbed/goBuild.ts";
import { startAgentProcess, waitFor, type AgentProcess, type LogLine } from "./support/agentProcess.ts";
import { runLwClient, watchedBy } from "./support/lwClient.ts";
import { resetOnMarkerServer } from "./support/resetServers.ts";
import { faultyApiserver, portOf } from "./support/faultyApiserver.ts";
import { loggedFor } from "./support/goOperatorFaults.ts";
import { assertKernelRequirements, skipWithoutKernelOrGo } from "./support/kernelRequirements.ts";

/** As bpftool names them: without their category. */
const SEND_TRACEPOINT = "sock_send_length";
/** Only the socket probe is on it; the uprobe programs are on the state tracepoint too (their follow channel). */
const RETRANSMIT_TRACEPOINT = "tcp_retransmit_skb";
const WIDGETS = "demo.lostwrite.dev/v1/widgets";
const SHORT_LIVED = path.join(path.dirname(fileURLToPath(import.meta.url)), "clients/lw_short_lived.py");

/** The tracepoints each bpftrace under the agent has BPF programs on, by its pid (bpftool perf show). */
function attachments(agentPid: number): Map<number, string[]> {
  const children = new Set<number>();
  for (const tid of readdirSync(`/proc/${agentPid}/task`)) {
    try {
      for (const pid of readFileSync(`/proc/${agentPid}/task/${tid}/children`, "utf8").split(" ").filter(Boolean)) children.add(Number(pid));
    } catch {
      // the thread ended meanwhile
    }
  }
  const listing = JSON.parse(execFileSync("bpftool", ["perf", "show", "-j"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] })) as { pid: number; tracepoint?: string }[];
  const byPid = new Map<number, string[]>();
  for (const entry of listing) {
    if (!children.has(entry.pid)) continue;
    byPid.set(entry.pid, [...(byPid.get(entry.pid) ?? []), ...(entry.tracepoint ? [entry.tracepoint] : [])]);
  }
  return byPid;
}

/** The agent's socket probe and its other bpftrace processes (uprobe programs). */
function probesOf(agentPid: number): { socket: { pid: number; tracepoints: string[] } | null; others: number[] } {
  const all = [...attachments(agentPid)];
  const socket = all.find(([, tracepoints]) => tracepoints.includes(RETRANSMIT_TRACEPOINT));
  return { socket: socket ? { pid: socket[0], tracepoints: socket[1] } : null, others: all.filter(([pid]) => pid !== socket?.[0]).map(([pid]) => pid) };
}

function stopChild(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGKILL");
  return exited;
}

describe("the send hook, attached only while a target needs it", { skip: skipWithoutKernelOrGo(), timeout: 300_000 }, () => {
  let dir: string;
  let api: Apiserver;
  let operator: ChildProcess | undefined;
  let operatorBinary: string;

  before(async () => {
    assertKernelRequirements();
    const go = goUnavailable();
    if (go !== null) throw new Error(`e2e test cannot run: ${go}`);
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-sendhook-"));
    const binary = await buildGoOperator(dir, { stripped: true });
    operatorBinary = binary;
    api = await startApiserver({ dir });
    // client-go's shape: its watch and its status PATCHes on one HTTP/2 connection.
    operator = spawn(binary, ["--server", api.url, "--namespace", "hooked", "--mode", "swallow", "--family", "xnet", "--timeout", "1s"], {
      stdio: ["ignore", "ignore", "inherit"],
    });
  });

  after(async () => {
    await stopChild(operator);
    await api?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("drops it once the only target is a Go operator followed per request, still follows the operator's older connection, and attaches it once the operator is no longer followed", async () => {
    const op = operator!.pid!;
    // Targets by pid only: no rule can make a program started later a target.
    const agent: AgentProcess = await startAgentProcess(["--target-pid", String(op), "--apiserver", `127.0.0.1:${api.port}`, "--span-grace", "0s", "--correlation-window", "1s"]);
    const log: LogLine[] = agent.log;
    try {
      await waitFor(`the Go probe to follow the operator [${op}]`, () => loggedFor(log, "Go probe follows", op), 60_000);
      // The socket probe started before the Go probe followed the operator, so with the hook:
      const first = probesOf(agent.child.pid!).socket;
      assert.ok(first && first.tracepoints.includes(SEND_TRACEPOINT), `the first socket probe is on the send tracepoint: ${JSON.stringify(first)}`);
      // restarted without it once no target has needed it for a while.
      await waitFor(
        "the socket probe restarted without the send hook",
        async () =>
          (await agent.metric("lostwrite_probe_restarts_total", { reason: "send_hook" })) === 1 &&
          (await agent.metric("lostwrite_probe_up")) === 1 && (probesOf(agent.child.pid!).socket?.pid ?? first.pid) !== first.pid,
        90_000,
      );
      assert.equal(await agent.metric("lostwrite_probe_send_hook"), 0);
      assert.equal(await agent.metric("lostwrite_probe_restarts_total", { reason: "exited" }), 0);
      const probes = probesOf(agent.child.pid!);
      assert.ok(probes.socket, `a socket probe: ${JSON.stringify(probes)}`);
      assert.ok(!probes.socket.tracepoints.includes(SEND_TRACEPOINT), `the socket probe is on ${probes.socket.tracepoints.join(", ")}`);
      // It learns connections at connect, and the operator's is older: the Go probe finds its
      // socket at its next request (a status written and answered), the agent hands it over.
      api.store.commit(WIDGETS, { apiVersion: "demo.lostwrite.dev/v1", kind: "Widget", metadata: { name: "w0", namespace: "hooked", generation: 1 }, spec: { size: 1 } });
      await waitFor("the operator's connection adopted by the new socket probe", async () => (await agent.metric("lostwrite_probe_adopted_connections_total")) >= 1, 10_000);
      for (const [pid, tracepoints] of attachments(agent.child.pid!)) assert.ok(!tracepoints.includes(SEND_TRACEPOINT), `no bpftrace of the agent is on ${SEND_TRACEPOINT}: [${pid}] ${tracepoints.join(", ")}`);

      // The operator's lost status write is still reported, once, by its path.
      const statusPath = "/apis/demo.lostwrite.dev/v1/namespaces/hooked/widgets/w1/status";
      api.control.addRule({ action: "reset", method: "PATCH", path: statusPath });
      api.store.commit(WIDGETS, { apiVersion: "demo.lostwrite.dev/v1", kind: "Widget", metadata: { name: "w1", namespace: "hooked", generation: 1 }, spec: { size: 1 } });
      await waitFor(`the loss of ${statusPath}`, () => agent.events.some((e) => e.request?.path === statusPath), 20_000);
      const events = agent.events.filter((e) => e.pid === op);
      assert.deepEqual(events.map((e) => [e.cause, e.request?.path]), [["connection_reset", statusPath]]);
      // The socket probe followed the reset connection, which it did not see open.
      const operatorSeries = { process: "go-operator" };
      await waitFor("the connection's reset and bytes counted by the socket probe", async () =>
        (await agent.metric("lostwrite_apiserver_connection_losses_total", { ...operatorSeries, reason: "reset" })) === 1 &&
        (await agent.metric("lostwrite_apiserver_write_bytes_total", operatorSeries)) > 0, 10_000);

      // The Go program gone (killed): the operator is on the socket path again, and needs the hook.
      // The agent restarts the Go program within a second; the socket probe, stopped for the hook, takes it all the same.
      for (const pid of probes.others) process.kill(pid, "SIGKILL");
      await waitFor(
        "the socket probe restarted with the send hook",
        async () => (await agent.metric("lostwrite_probe_restarts_total", { reason: "send_hook" })) === 2 && (await agent.metric("lostwrite_probe_send_hook")) === 1,
        90_000,
      );
      const hooked = probesOf(agent.child.pid!).socket;
      assert.ok(hooked?.tracepoints.includes(SEND_TRACEPOINT), `the socket probe is on the send tracepoint again: ${JSON.stringify(hooked)}`);
      // The restarted Go program follows the operator again: the hook goes again.
      await waitFor(
        "the socket probe restarted without the send hook again",
        async () => (await agent.metric("lostwrite_probe_restarts_total", { reason: "send_hook" })) === 3 && (await agent.metric("lostwrite_probe_send_hook")) === 0,
        90_000,
      );
    } finally {
      await agent.stop();
    }
  });

  it("keeps it while a rule can match a program started later: a client that lives 300 ms, started at once, has its lost write reported", async () => {
    const server: net.Server = await faultyApiserver();
    const port = portOf(server);
    // The kernel names a process after the file it exec'd: a link names the python client.
    symlinkSync(realpathSync("/usr/bin/python3"), path.join(dir, "lw-short"));
    const agent = await startAgentProcess(["--target-comm", "^lw-short$", "--apiserver", `127.0.0.1:${port}`, "--rescan-interval", "1m", "--correlation-window", "200ms"]);
    try {
      assert.equal(await agent.metric("lostwrite_probe_send_hook"), 1);
      assert.ok(probesOf(agent.child.pid!).socket?.tracepoints.includes(SEND_TRACEPOINT));
      // Its first send 50 ms after exec is long before any bpftrace could start for it.
      const client = spawn(path.join(dir, "lw-short"), [SHORT_LIVED, String(port), "50", "300"], { stdio: ["ignore", "pipe", "inherit"] });
      let out = "";
      client.stdout.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
      const code = await new Promise<number | null>((resolve) => client.once("exit", resolve));
      assert.equal(code, 0);
      const { write_errno } = JSON.parse(out) as { write_errno: string | null };
      assert.ok(write_errno === "EPIPE" || write_errno === "ECONNRESET", `the client wrote into the dead connection: ${write_errno}`);
      await waitFor("the short-lived client's loss", () => agent.events.some((e) => e.pid === client.pid), 15_000);
      assert.equal(agent.events.filter((e) => e.pid === client.pid).length, 1);
    } finally {
      await agent.stop();
      server.close();
    }
  });
  it("with --send-hook targets, drops it while the only target is a followed Go operator though a rule can add one, and attaches it for a program the rule matches later", async () => {
    const op = operator!.pid!;
    const server = await resetOnMarkerServer();
    const client = path.join(dir, "lw-client");
    symlinkSync(realpathSync("/usr/bin/python3"), client);
    const agent = await startAgentProcess([
      "--target-comm", `^(${path.basename(operatorBinary)}|lw-client)$`, "--send-hook", "targets",
      "--apiserver", `127.0.0.1:${api.port}`, "--apiserver", `127.0.0.1:${portOf(server)}`, "--correlation-window", "200ms",
    ]);
    const restarts = (): Promise<number> => agent.metric("lostwrite_probe_restarts_total", { reason: "send_hook" });
    try {
      await waitFor(`the Go probe to follow the operator [${op}]`, () => loggedFor(agent.log, "Go probe follows", op), 60_000);
      await waitFor(
        "the socket probe restarted without the send hook, the rule notwithstanding",
        async () => (await restarts()) === 1 && (await agent.metric("lostwrite_probe_up")) === 1 && (await agent.metric("lostwrite_probe_send_hook")) === 0,
        90_000,
      );
      assert.ok(!probesOf(agent.child.pid!).socket?.tracepoints.includes(SEND_TRACEPOINT));
      // A python client the rule matches is on the socket path: the hook comes back for it.
      // It connects once told to, when the agent watches it and the hook is attached.
      let clientPid = 0;
      const steps = await runLwClient(client, "plain_reset", portOf(server), async (pid) => {
        clientPid = pid;
        await watchedBy(agent, "lw-client", pid, 10_000);
        await waitFor(
          "the socket probe restarted with the send hook for the client",
          async () => (await restarts()) === 2 && (await agent.metric("lostwrite_probe_up")) === 1 && (await agent.metric("lostwrite_probe_send_hook")) === 1,
          60_000,
        );
      });
      assert.ok(steps.some((step) => step.step === "sendto_after_reset" && step.errno), `the client wrote into the reset connection: ${JSON.stringify(steps)}`);
      assert.ok(probesOf(agent.child.pid!).socket?.tracepoints.includes(SEND_TRACEPOINT));
      await waitFor("the client's lost write", () => agent.events.some((e) => e.pid === clientPid), 15_000);
    } finally {
      await agent.stop();
      server.close();
    }
  });
});
