// On the real kernel, with a real controller-runtime operator
// (testbed/cr-operator: a manager, its informers, one controller, client-go's
// one HTTP/2 connection for watches and writes) built as kubebuilder builds a
// manager: plain `go build`, symbols kept. Its status writes go through
// Status().Update() (a PUT) or Status().Patch() (a merge PATCH). A reset on
// one Widget's status write must be reported exactly once, by its path and
// object, from the agent's uprobes on the binary; an answered one not at all.
// When the operator returns the error, controller-runtime requeues it and
// the write lands on a new connection; in swallow mode it logs the error and
// reports success, and the loss is joined with its reconcile span as silent.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import { buildCrOperator } from "../../../testbed/cr-operator/build.ts";
import { goUnavailable } from "../../../testbed/goBuild.ts";
import type { LossEvent } from "../../src/model.ts";
import { startAgentProcess, waitFor, type AgentProcess, type LogLine } from "./support/agentProcess.ts";
import { assertKernelRequirements, skipWithoutKernelOrGo } from "./support/kernelRequirements.ts";

const WIDGETS = "demo.lostwrite.dev/v1/widgets";
/** How long the agent waits for spans that may say a loss was noticed (its correlation window). */
const CORRELATION_WINDOW = "2s";
/** Past the correlation window: a second event of the same loss (an echo) would have come by now. */
const SETTLE_MS = 3000;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const statusPathOf = (namespace: string, name: string): string => `/apis/demo.lostwrite.dev/v1/namespaces/${namespace}/widgets/${name}/status`;

/** The operator's builds: as kubebuilder builds a manager (symbols kept), stripped, and with Go 1.27 (its HTTP/2 in net/http/internal/http2). */
type Build = "symbols" | "stripped" | "go1.27.3";

interface Case {
  verb: "update" | "patch";
  swallow: boolean;
  build?: Build;
}

interface Operator {
  child: ChildProcess;
  pid: number;
  namespace: string;
  stop(): Promise<void>;
}

interface Row {
  operator: string;
  write: string;
  expected: string;
  detected: string;
}

const methodOf = (verb: Case["verb"]): "PUT" | "PATCH" => (verb === "update" ? "PUT" : "PATCH");
const caseName = (c: Case): string =>
  `Status().${c.verb === "update" ? "Update" : "Patch"}()${c.swallow ? ", swallow" : ""}${c.build && c.build !== "symbols" ? `, ${c.build}` : ""}`;

// Longer than the other Go e2e tests: on a machine whose module cache is cold,
// building the operator fetches and compiles about 80 modules (3 minutes on 2 cores).
describe("a controller-runtime operator's lost status writes, from uprobes on its binary", { skip: skipWithoutKernelOrGo(), timeout: 720_000 }, () => {
  let dir: string;
  let api: Apiserver;
  let agent: AgentProcess;
  let agentLog: LogLine[];
  const binaries = {} as Record<Build, string>;
  const rows: Row[] = [];

  before(async () => {
    assertKernelRequirements();
    const go = goUnavailable();
    if (go !== null) throw new Error(`e2e test cannot run: ${go}`);
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-cr-"));
    binaries.symbols = await buildCrOperator(dir, { stripped: false });
    binaries.stripped = await buildCrOperator(dir, { stripped: true });
    binaries["go1.27.3"] = await buildCrOperator(dir, { stripped: false, go: "go1.27.3" });
    api = await startApiserver({ dir });
    agent = await startAgentProcess([
      // cr-operator-symbols: its comm is "cr-operator-sym".
      "--target-comm", "^cr-operator",
      "--apiserver", `127.0.0.1:${api.port}`,
      "--correlation-window", CORRELATION_WINDOW,
      // The default span grace: a new operator's first spans may still be in
      // its exporter's batch when its first write is lost.
    ]);
    agentLog = agent.log;
  });

  after(async () => {
    if (rows.length > 0) {
      console.log(`# controller-runtime operator, expected vs detected\n${rows.map((r) => `#   ${r.operator.padEnd(38)} ${r.write.padEnd(10)} expected: ${r.expected.padEnd(56)} detected: ${r.detected}`).join("\n")}`);
    }
    if (process.env.CR_E2E_DEBUG) console.error(agent?.stderr.filter((l) => !l.includes("boundary")).join("\n"), JSON.stringify(agent?.events, null, 1));
    await agent?.stop();
    await api?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const loggedFor = (msg: "Go probe follows" | "Go probe no longer follows", pid: number): boolean =>
    agentLog.some((line) => line.msg === msg && line.pid === pid);

  async function startOperator(c: Case): Promise<Operator> {
    const namespace = `cr-${c.verb}${c.swallow ? "-swallow" : ""}-${(c.build ?? "symbols").replace(/\./g, "-")}`;
    const child = spawn(binaries[c.build ?? "symbols"], [
      "--kubeconfig", api.kubeconfigPath, "--namespace", namespace, "--status-write", c.verb, ...(c.swallow ? ["--swallow"] : []),
    ], { stdio: ["ignore", "pipe", process.env.CR_E2E_DEBUG ? "inherit" : "ignore"], env: { ...process.env, OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${agent.otlpPort}` } });
    const pid = child.pid!;
    let stdout = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    const stop = async (): Promise<void> => {
      if (child.exitCode === null) {
        child.kill("SIGKILL");
        await new Promise((resolve) => child.once("exit", resolve));
      }
      await waitFor(`the Go probe to let the stopped operator [${pid}] go`, () => loggedFor("Go probe no longer follows", pid), 30_000);
    };
    try {
      await waitFor(`the operator [${pid}] to sync its cache`, () => stdout.includes('"ready":true') || child.exitCode !== null, 30_000);
      assert.equal(child.exitCode, null, "the operator runs");
      // Its requests are read from uprobes on its binary once the program follows it.
      await waitFor(`the Go probe to follow the operator [${pid}]`, () => loggedFor("Go probe follows", pid), 30_000);
    } catch (error) {
      child.kill("SIGKILL");
      const said = agentLog.filter((line) => /Go|binary/.test(line.msg)).map((line) => JSON.stringify(line));
      throw new Error(`${(error as Error).message}; the agent's lines on Go binaries:\n${said.join("\n") || "(none)"}`);
    }
    return { child, pid, namespace, stop };
  }

  const commit = (op: Operator, name: string): void => {
    api.store.commit(WIDGETS, { apiVersion: "demo.lostwrite.dev/v1", kind: "Widget", metadata: { name, namespace: op.namespace, generation: 1 }, spec: { size: 1 } });
  };
  const landed = (op: Operator, name: string): boolean =>
    (api.store.get(WIDGETS, op.namespace, name)?.status as { observedGeneration?: number } | undefined)?.observedGeneration === 1;
  const eventsFor = (statusPath: string): LossEvent[] => agent.events.filter((e) => e.request?.path === statusPath);
  const describeEvents = (events: LossEvent[]): string =>
    events.length === 0
      ? "no event"
      : events.map((e) => `${e.cause} ${e.request?.method} …/${e.request?.object?.name}/status noticed=${e.noticed}${e.correlation === "span" ? " +span" : ""}`).join("; ");

  async function verdicts(c: Case): Promise<void> {
    const op = await startOperator(c);
    const method = methodOf(c.verb);
    try {
      // An answered status write: it lands, and nothing is reported.
      const answered = "answered";
      commit(op, answered);
      await waitFor(`${answered} to get its status`, () => landed(op, answered), 20_000);

      // A reset on the next one: the connection dies with the write unanswered.
      const lost = "lost";
      const lostPath = statusPathOf(op.namespace, lost);
      api.control.addRule({ method, path: lostPath, action: "reset" });
      commit(op, lost);
      await waitFor(`the loss of ${lostPath}`, () => eventsFor(lostPath).length > 0, 20_000);
      if (!c.swallow) {
        // Returned as an error, requeued by controller-runtime: the retry lands on a new connection.
        await waitFor(`${lost}'s requeued write to land`, () => landed(op, lost), 20_000);
      }
      await sleep(SETTLE_MS); // nothing more may come of either write: an echo of the loss, a loss of the answered one

      const lostEvents = eventsFor(lostPath);
      const answeredEvents = eventsFor(statusPathOf(op.namespace, answered));
      const expectedNoticed = c.swallow ? "no" : "yes";
      rows.push(
        { operator: caseName(c), write: answered, expected: "no event", detected: describeEvents(answeredEvents) },
        { operator: caseName(c), write: lost, expected: `connection_reset ${method} …/${lost}/status noticed=${expectedNoticed} +span`, detected: describeEvents(lostEvents) },
      );

      assert.deepEqual(answeredEvents, [], "an answered status write is no loss");
      assert.equal(lostEvents.length, 1, `one lost request, one event: ${JSON.stringify(lostEvents)}`);
      const event = lostEvents[0]!;
      assert.equal(event.cause, "connection_reset");
      assert.equal(event.pid, op.pid);
      assert.equal(event.apiserver, `127.0.0.1:${api.port}`);
      assert.equal(event.request?.method, method);
      assert.equal(event.request?.path, lostPath);
      assert.equal(typeof event.request?.stream_id, "number");
      assert.deepEqual(event.request?.object, { namespace: op.namespace, resource: "widgets", name: lost, subresource: "status" });
      // Joined with the reconcile that made the write: its span names the controller and the object.
      assert.equal(event.correlation, "span", JSON.stringify(event));
      assert.deepEqual(event.reconcile, { controller: "widget", namespace: op.namespace, name: lost, kind: "Widget" });
      assert.match(event.trace_id ?? "", /^[0-9a-f]{32}$/);
      assert.equal(event.noticed, expectedNoticed, c.swallow ? "the reconcile span says OK: a silent loss" : "the reconcile span says ERROR");
      const socketPath = agent.events.filter((e) => e.pid === op.pid && e.request === null);
      assert.deepEqual(socketPath, [], "the socket path's view of the same death is folded into the request's event");
    } finally {
      await op.stop().catch((error: unknown) => console.error(String(error)));
    }
  }

  it("Status().Update() (PUT), the error returned: the reset write once, by path, noticed; the answered one none", async () => {
    await verdicts({ verb: "update", swallow: false });
  });

  it("Status().Patch() (merge PATCH), the error returned: the same", async () => {
    await verdicts({ verb: "patch", swallow: false });
  });

  it("Status().Update(), swallow mode: the reset write once, joined with its reconcile span, silent", async () => {
    await verdicts({ verb: "update", swallow: true });
  });

  it("Status().Patch(), swallow mode: the same", async () => {
    await verdicts({ verb: "patch", swallow: true });
  });

  it("stripped (-s -w), Status().Patch(), swallow mode: the same, from the verified layout table", async () => {
    await verdicts({ verb: "patch", swallow: true, build: "stripped" });
  });

  it("built with Go 1.27.3 (client-go's HTTP/2 in net/http/internal/http2), Status().Update(), swallow mode: the same", async () => {
    await verdicts({ verb: "update", swallow: true, build: "go1.27.3" });
  });
});
