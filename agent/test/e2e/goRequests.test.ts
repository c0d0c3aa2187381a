// On the real kernel, with real Go binaries built here: the Go sample
// operator (testbed/go-operator) puts its watch and its status PATCHes on one
// HTTP/2 connection, as client-go does, so watch events keep arriving while
// a PATCH waits for its answer — the shape in which byte counting on the
// socket cannot tell which request died. The agent follows each request with
// uprobes on the operator's binary and must report each lost status write
// exactly once, by its path and stream, with the right cause; retries and
// GOAWAY must report none. Both HTTP/2 families (golang.org/x/net/http2, as
// client-go configures it, and net/http's bundled copy), stripped and not.
// Short-lived and restarting clients (kubectl, a crash-looping operator) are
// uprobeLifecycle.test.ts's.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import { buildGoOperator } from "../../../testbed/go-operator/build.ts";
import { goUnavailable } from "../../../testbed/goBuild.ts";
import { repoPath } from "../repoPath.ts";
import { startAgentProcess, waitFor, type AgentProcess, type LogLine } from "./support/agentProcess.ts";
import { goOperatorFaults, loggedFor, type GoOperatorFaults, type Operator } from "./support/goOperatorFaults.ts";
import { daemonSetShape, inDeployedShape } from "./support/deployedShape.ts";
import { assertKernelRequirements, skipWithoutKernelOrGo } from "./support/kernelRequirements.ts";

const WIDGETS = "demo.lostwrite.dev/v1/widgets";
/** How long the agent waits for a refused write's retry (its correlation window). */
const RETRY_WAIT = "2s";

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe("Go HTTP/2 status writes, request by request, from uprobes", { skip: skipWithoutKernelOrGo(), timeout: 420_000 }, () => {
  let dir: string;
  let api: Apiserver;
  /** The same on IPv6 loopback: the Go program reads an IPv6 peer from the kernel's socket as two words. */
  let api6: Apiserver;
  let agent: AgentProcess;
  let agentLog: LogLine[];
  let faults: GoOperatorFaults;
  const binaries: Record<"stripped" | "symbols", string> = { stripped: "", symbols: "" };

  before(async () => {
    assertKernelRequirements();
    const go = goUnavailable();
    if (go !== null) throw new Error(`e2e test cannot run: ${go}`);
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-go-"));
    [binaries.stripped, binaries.symbols] = await Promise.all([
      buildGoOperator(dir, { stripped: true }),
      buildGoOperator(dir, { stripped: false }),
    ]);
    api = await startApiserver({ dir });
    const dir6 = path.join(dir, "ipv6");
    mkdirSync(dir6);
    api6 = await startApiserver({ dir: dir6, host: "::1" });
    agent = await startAgentProcess([
      // go-operator, go-operator-symbols (comm: "go-operator-sym") and kubectl.
      "--target-comm", "^(go-operator|kubectl)",
      "--apiserver", `127.0.0.1:${api.port}`,
      "--apiserver", `[::1]:${api6.port}`,
      "--correlation-window", RETRY_WAIT,
      "--span-grace", "0s",
    ]);
    agentLog = agent.log;
    faults = goOperatorFaults(api, agent, agentLog);
  });

  after(async () => {
    if (process.env.GO_E2E_DEBUG) console.error(agent?.stderr.filter((l) => !l.includes("boundary")).join("\n"), JSON.stringify(agent?.events, null, 1));
    await agent?.stop();
    await api?.close();
    await api6?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function retried(code: string): Promise<number> {
    return agent.metric("lostwrite_status_write_retried_total", { code });
  }

  it("x/net/http2 (client-go's), stripped: every verdict, one event each, retries and GOAWAY none", async () => {
    const op = await faults.startOperator(binaries.stripped, "xnet", "xnet-stripped");
    try {
      await faults.coreVerdicts(op);

      const before429 = await retried("429");
      const throttled = faults.statusWrite(op, { action: "status", code: 429, retryAfterSeconds: 1 });
      await waitFor("the throttled write to land on its retry", () => faults.landed(op, throttled.name), 10_000);
      await waitFor("the retry to be counted", async () => (await retried("429")) === before429 + 1, 5000);
      await sleep(3000); // past the retry wait: the refused try must not come out as a loss
      assert.deepEqual(faults.eventsFor(throttled.path), []);

      const beforeGoaway = await retried("goaway");
      const goaway = faults.statusWrite(op, { action: "goaway" });
      await waitFor("the write GOAWAY refused to land on a new connection", () => faults.landed(op, goaway.name), 10_000);
      await waitFor("Go's own retry to be counted", async () => (await retried("goaway")) === beforeGoaway + 1, 5000);
      await sleep(2500);
      assert.deepEqual(faults.eventsFor(goaway.path), []);

      const healthy = faults.statusWrite(op, null);
      await waitFor("an unfaulted write to land", () => faults.landed(op, healthy.name), 10_000);
      await sleep(2500);
      assert.deepEqual(faults.eventsFor(healthy.path), []);
    } finally {
      await op.stop().catch((error: unknown) => console.error(String(error)));
    }
  });

  it("net/http's bundled http2, stripped: the same verdicts", async () => {
    const op = await faults.startOperator(binaries.stripped, "std", "std-stripped");
    try {
      await faults.coreVerdicts(op);
    } finally {
      await op.stop().catch((error: unknown) => console.error(String(error)));
    }
  });

  it("x/net/http2 to an apiserver on IPv6 loopback: its peer read from the socket is [::1], a reset write reported by path", async () => {
    const faults6 = goOperatorFaults(api6, agent, agentLog);
    const op = await faults6.startOperator(binaries.stripped, "xnet", "xnet-ipv6");
    try {
      const reset = faults6.statusWrite(op, { action: "reset" });
      const event = await faults6.oneLoss(op, reset.path, reset.name);
      assert.equal(event.cause, "connection_reset");
      assert.equal(event.apiserver, `[::1]:${api6.port}`);
    } finally {
      await op.stop().catch((error: unknown) => console.error(String(error)));
    }
  });

  it("x/net/http2 in a binary with its symbol table: the same verdicts", async () => {
    const op = await faults.startOperator(binaries.symbols, "xnet", "xnet-symbols");
    try {
      await faults.coreVerdicts(op);
    } finally {
      await op.stop().catch((error: unknown) => console.error(String(error)));
    }
  });

  it("a followed operator's writes are its requests: the kernel leaves its sends alone, its watch's flow control is no write", async () => {
    const op = await faults.startOperator(binaries.stripped, "xnet", "writes-are-requests");
    try {
      const requestsTo = (): number => api.requestsSeen().filter((r) => r.includes(`/namespaces/${op.namespace}/`)).length;
      const writes = (): Promise<number> => agent.metric("lostwrite_apiserver_writes_total", { process: "go-operator" });
      // Past the kernel's switch to request level and one counter print.
      await sleep(1500);
      const [writesBefore, requestsBefore] = [await writes(), requestsTo()];
      // 256 KiB objects on the watch: Go answers each with WINDOW_UPDATE
      // sends, which the socket path counted as writes.
      const names: string[] = [];
      for (let i = 0; i < 5; i++) {
        const name = `big${i}`;
        names.push(name);
        api.store.commit(WIDGETS, {
          apiVersion: "demo.lostwrite.dev/v1", kind: "Widget", metadata: { name, namespace: op.namespace, generation: 1 }, spec: { size: 1, blob: "x".repeat(256 << 10) },
        });
      }
      await waitFor("the five status writes to land", () => names.every((name) => faults.landed(op, name)), 15_000);
      await sleep(1500); // the Go lines' hold, the drain and the kernel's next counter print
      const requests = requestsTo() - requestsBefore;
      assert.equal(requests, 5, `five status PATCHes and nothing else: ${api.requestsSeen().slice(-requests).join(", ")}`);
      assert.equal((await writes()) - writesBefore, requests);

      // Its connections are still followed in the kernel, also one opened
      // after it was marked, which no send of it introduces: learned at connect.
      const resets = (): Promise<number> => agent.metric("lostwrite_apiserver_connection_losses_total", { process: "go-operator", reason: "reset" });
      const first = faults.statusWrite(op, { action: "reset" });
      await faults.oneLoss(op, first.path, first.name);
      const resetsBefore = await resets();
      const second = faults.statusWrite(op, { action: "reset" }); // on the connection Go opened after the first reset
      await faults.oneLoss(op, second.path, second.name);
      assert.equal((await resets()) - resetsBefore, 1, "the reset of a connection opened while the kernel left its sends alone");
    } finally {
      await op.stop().catch((error: unknown) => console.error(String(error)));
    }
  });

  it("a replica started while a write waits for its answer changes nothing: the program is not restarted, the answered write is no loss", async () => {
    const op = await faults.startOperator(binaries.stripped, "xnet", "replica-a", "10s");
    let replica: Operator | null = null;
    try {
      const restarts = (): Promise<number> => agent.metric("lostwrite_go_probe_restarts_total");
      const restartsBefore = await restarts();
      const programLines = (): number => agentLog.filter((line) => line.msg === "Go probe attached" || line.msg === "Go probe detached").length;
      const programLinesBefore = programLines();
      // Answered 1 s after it is sent: the replica starts meanwhile, and
      // the same program follows it, with no gap for the answer to fall in.
      const slow = faults.statusWrite(op, { action: "delay", for: 1000 });
      await waitFor("the slow write to be sent", () => api.requestsSeen().some((r) => r.startsWith(`PATCH ${slow.path}`)), 10_000);
      replica = await faults.startOperator(binaries.stripped, "xnet", "replica-b", "10s");
      await waitFor("the slow write to land", () => faults.landed(op, slow.name), 10_000);
      assert.equal(programLines(), programLinesBefore, "no program attached or detached for the replica");
      assert.equal(await restarts(), restartsBefore, "no program restarted");
      // The connection's end: the server closes it on the next write.
      const closed = faults.statusWrite(op, { action: "close" });
      await faults.oneLoss(op, closed.path, closed.name);
      assert.deepEqual(faults.eventsFor(slow.path), [], "the answered write is no loss");
    } finally {
      await replica?.stop().catch((error: unknown) => console.error(String(error)));
      await op.stop().catch((error: unknown) => console.error(String(error)));
    }
  });

  it("--record, then replay: a Go operator's session replays to the same events, requests and all", async () => {
    const recording = path.join(dir, "go-session.jsonl");
    const recorder = await startAgentProcess([
      "--target-comm", "^go-operator$", "--apiserver", `127.0.0.1:${api.port}`,
      "--correlation-window", RETRY_WAIT, "--span-grace", "0s", "--record", recording,
    ]);
    const recorderLog = recorder.log;
    try {
      const op = await faults.startOperator(binaries.stripped, "xnet", "recorded");
      try {
        await waitFor("the recording agent's Go probe to follow the operator", () => loggedFor(recorderLog, "Go probe follows", op.pid), 30_000);
        for (const rule of [{ action: "reset" }, { action: "status", code: 409 }, { action: "close" }] as const) {
          const write = faults.statusWrite(op, rule);
          await waitFor(`the recording agent to report ${write.path} (${rule.action})`, () => recorder.events.some((e) => e.request?.path === write.path), 20_000);
        }
        await sleep(2500); // nothing more is coming
      } finally {
        await op.stop().catch((error: unknown) => console.error(String(error)));
      }
    } finally {
      await recorder.stop();
    }
    const live = recorder.events.map((e) => JSON.stringify(e));
    assert.ok(recorder.events.filter((e) => e.request !== null).length >= 3, `request-level events: ${live.join("\n")}`);
    const replayed = execFileSync(repoPath("node_modules/.bin/node"), [repoPath("agent/src/cli.ts"), "replay", "--json", recording], {
      encoding: "utf8",
      env: { ...process.env, PATH: "/usr/bin:/bin" },
    })
      .split("\n")
      .filter(Boolean);
    if (process.env.GO_E2E_DEBUG) console.error("LIVE\n" + live.join("\n") + "\nREPLAYED\n" + replayed.join("\n"));
    assert.deepEqual(replayed, live);
  });

  it("in the DaemonSet's shape (own PID namespace, host /proc, the manifest's capabilities): a reset status write, by path", async () => {
    const shape = daemonSetShape();
    const shaped = await startAgentProcess(
      ["--target-comm", "^go-operator$", "--apiserver", `127.0.0.1:${api.port}`, "--correlation-window", RETRY_WAIT, "--span-grace", "0s"],
      { LOSTWRITE_PROC_ROOT: shape.procRoot },
      { wrap: (argv) => inDeployedShape(argv, shape) },
    );
    const shapedLog = shaped.log;
    try {
      const op = await faults.startOperator(binaries.stripped, "xnet", "shaped");
      try {
        // Through /host/proc/<pid>/exe, with host pids in the filter, from inside the agent's PID namespace.
        await waitFor("the shaped agent's Go probe to follow the operator", () => loggedFor(shapedLog, "Go probe follows", op.pid), 30_000);
        const reset = faults.statusWrite(op, { action: "reset" });
        await waitFor("the shaped agent to report the reset write", () => shaped.events.some((e) => e.request?.path === reset.path), 20_000);
        await sleep(2000);
        const events = shaped.events.filter((e) => e.pid === op.pid);
        assert.deepEqual(
          events.map((e) => [e.cause, e.request?.path, typeof e.request?.stream_id]),
          [["connection_reset", reset.path, "number"]],
          JSON.stringify(events),
        );
      } finally {
        await op.stop().catch((error: unknown) => console.error(String(error)));
      }
    } finally {
      await shaped.stop();
    }
  });
});
