// On the real kernel: a status write the testbed apiserver kills on
// the wire becomes a loss event that names the Widget, the controller, the
// operator's trace and the span it belongs to, says whether the operator
// noticed, and reaches every output: the stdout event log, the /events
// WebSocket, `lostwrite tail --json`, and a `status write lost` span in the
// operator's own trace in Jaeger. The operators' spans go to the agent and on,
// through --otlp-forward, to the same Jaeger: read back through its query
// API, they are what the events are compared with.
//
// One agent watches two operator processes, `swallow` (namespace swallow) and
// `correct` (namespace correct). Each reconciles over one long-lived HTTP/2
// connection, as client-go does; a connection fault kills it, so before each
// fault a warm-up Widget makes the operator open a fresh one and settle it.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import WebSocket from "ws";
import type { LossCause, LossEvent } from "../../src/model.ts";
import { waitFor } from "./support/agentProcess.ts";
import { assertKernelRequirements, skipWithoutKernel } from "./support/kernelRequirements.ts";
import type { JaegerSpan } from "./support/jaeger.ts";
import { startTestbedStack, type OperatorProcess, type TestbedStack } from "./support/testbedStack.ts";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

interface FaultKind {
  name: string;
  rule: Record<string, unknown>;
  cause: LossCause;
  errno: string | null;
}

// Every fault the testbed injects on a status write (testbed/README.md), with
// the cause the agent must give it.
const FAULTS: FaultKind[] = [
  { name: "reset", rule: { action: "reset" }, cause: "connection_reset", errno: "ECONNRESET" },
  { name: "close", rule: { action: "close" }, cause: "connection_closed_unanswered", errno: null },
  { name: "refuse", rule: { action: "refuse", for: "1s", existing: "reset" }, cause: "connection_reset", errno: "ECONNRESET" },
  { name: "conflict", rule: { action: "status", code: 409 }, cause: "http_rejected", errno: null },
];

const statusPath = (namespace: string, name: string): string =>
  `/apis/demo.lostwrite.dev/v1/namespaces/${namespace}/widgets/${name}/status`;

describe("loss events joined with the operator's spans, on the real kernel", { skip: skipWithoutKernel(), timeout: 150_000 }, () => {
  let stack: TestbedStack;
  let swallow: OperatorProcess;
  let correct: OperatorProcess;
  const feed: LossEvent[] = [];
  let feedSocket: WebSocket;
  let startedAt: string;
  let warmups = 0;

  before(async () => {
    assertKernelRequirements();
    startedAt = new Date().toISOString();
    stack = await startTestbedStack({
      operators: [
        { mode: "swallow", namespace: "swallow", workers: 2 },
        { mode: "correct", namespace: "correct", workers: 2 },
      ],
      correlationWindow: "2s",
    });
    [swallow, correct] = stack.operators as [OperatorProcess, OperatorProcess];
    feedSocket = new WebSocket(`${stack.agent.url.replace(/^http/, "ws")}/events`);
    feedSocket.on("message", (data: Buffer) => feed.push(JSON.parse(data.toString("utf8")) as LossEvent));
    await new Promise<void>((resolve, reject) => {
      feedSocket.once("open", resolve);
      feedSocket.once("error", reject);
    });
  });

  after(async () => {
    feedSocket?.close();
    if (process.env.LOSTWRITE_E2E_DEBUG && stack) {
      console.error({ events: stack.agent.events, faults: stack.apiserver.faultLog(), agent: stack.agent.stderr, operators: stack.operators.map((o) => o.log) });
    }
    await stack?.close();
  });

  /** Makes the operator open its reconcile connection and settle it (a status write that lands). */
  async function warm(operator: OperatorProcess): Promise<void> {
    const namespace = operator.namespace!;
    const name = `warm-${++warmups}`;
    stack.createWidget(namespace, name);
    // Its answer read by the operator, not only stored: else it is still in flight when the next fault hits.
    await waitFor(`the operator to have written ${namespace}/${name}`, () =>
      operator.log.some((line) => line.includes('"msg":"status written"') && line.includes(`"name":"${name}"`)), 15_000);
  }

  /**
   * The event's trace in Jaeger once it holds the client span the event
   * names, that span's parent, and the agent's loss span (Jaeger stores what
   * its receiver batched a moment after it arrived).
   */
  async function traceOf(event: LossEvent): Promise<JaegerSpan[]> {
    let spans: JaegerSpan[] = [];
    await waitFor(`trace ${event.trace_id} in Jaeger with the client, reconcile and loss spans`, async () => {
      spans = (await stack.traces.trace(event.trace_id!)) ?? [];
      const client = spans.find((s) => s.spanId === event.span_id);
      return client !== undefined && spans.some((s) => s.spanId === client.parentSpanId) && spans.some((s) => s.name === "status write lost");
    }, 10_000);
    return spans;
  }

  /** Arms `rule` on the status write of a new Widget and waits for the loss event naming it. */
  async function loseStatusWrite(operator: OperatorProcess, name: string, fault: FaultKind): Promise<LossEvent> {
    const namespace = operator.namespace!;
    await warm(operator);
    const eventsBefore = stack.agent.events.length;
    stack.apiserver.control.addRule({ id: `${namespace}-${name}`, method: "PATCH", path: `*${statusPath(namespace, name)}`, ...fault.rule });
    stack.createWidget(namespace, name);
    let event: LossEvent | undefined;
    try {
      await waitFor(`the ${fault.cause} event of ${namespace}/${name}`, () => {
        event = stack.agent.events.find((e) => e.reconcile?.name === name && e.reconcile.namespace === namespace && e.cause === fault.cause);
        return event !== undefined;
      }, 15_000);
    } catch (error) {
      const since = stack.agent.events.slice(eventsBefore);
      throw new Error(`${(error as Error).message}; events since the fault was armed: ${JSON.stringify(since)}; faults: ${JSON.stringify(stack.apiserver.faultLog().filter((f) => f.rule === `${namespace}-${name}`))}`);
    }
    return event!;
  }

  async function assertJoined(operator: OperatorProcess, name: string, fault: FaultKind, event: LossEvent): Promise<void> {
    const namespace = operator.namespace!;
    const context = JSON.stringify(event);
    assert.equal(event.correlation, "span", context);
    assert.deepEqual(event.reconcile, { controller: "widget", namespace, name, kind: "Widget" }, context);
    assert.equal(event.noticed, operator.mode === "swallow" ? "no" : "yes", context);
    assert.equal(event.cause, fault.cause, context);
    assert.equal(event.errno, fault.errno, context);
    assert.equal(event.apiserver, stack.apiserverAddress, context);
    assert.equal(event.node, "e2e-node");
    assert.deepEqual(event.request, {
      method: "PATCH",
      path: statusPath(namespace, name),
      status_code: fault.cause === "http_rejected" ? 409 : null,
    }, context);
    if (fault.cause === "http_rejected") {
      // Seen only in the span: the pid in a span is the process's own view, not reported as a host pid.
      assert.equal(event.pid, null, context);
    } else {
      assert.equal(event.pid, operator.pid, context);
      assert.equal(event.process, "MainThread", "a Node 24 process's comm");
      assert.ok((event.unanswered_bytes ?? 0) >= 64, `the unanswered request's bytes: ${context}`);
    }

    // The span the event names is the operator's HTTP client span for this
    // status write, in the reconcile's trace, as the operator exported it.
    const trace = await traceOf(event);
    const client = trace.find((s) => s.spanId === event.span_id)!;
    assert.equal(client.tags["span.kind"], "client");
    assert.equal(client.name, "PATCH");
    assert.equal(client.tags["url.path"], statusPath(namespace, name));
    assert.equal(client.service, operator.serviceName);
    assert.equal(client.resource["process.pid"], operator.pid);
    const reconcile = trace.find((s) => s.spanId === client.parentSpanId)!;
    assert.equal(reconcile.name, "reconcile Widget");
    assert.equal(reconcile.tags.name, name);
    // The operator's own verdict: a swallowing operator leaves the status unset.
    assert.equal(reconcile.tags["otel.status_code"], operator.mode === "swallow" ? undefined : "ERROR");

    // The agent's span sits under that client span, in the operator's trace.
    const lost = trace.filter((s) => s.name === "status write lost");
    assert.equal(lost.length, 1, `one loss span in the trace: ${JSON.stringify(lost)}`);
    assert.equal(lost[0]!.parentSpanId, event.span_id);
    assert.equal(lost[0]!.tags["otel.status_code"], "ERROR");
    assert.equal(lost[0]!.service, "lostwrite");
    assert.equal(lost[0]!.tags["lostwrite.cause"], fault.cause);
    assert.equal(lost[0]!.tags["lostwrite.noticed"], event.noticed);
    assert.equal(lost[0]!.tags["server.port"], stack.apiserver.port);
    if (fault.cause !== "http_rejected") {
      assert.equal(lost[0]!.tags["process.pid"], operator.pid);
      // At the kernel time of the failure: within the client span, not when the event was emitted.
      assert.ok(lost[0]!.startTimeUs >= client.startTimeUs, "the loss is not before the request started");
    } else {
      assert.equal(lost[0]!.tags["http.response.status_code"], 409);
    }
  }

  for (const fault of FAULTS) {
    it(`${fault.name}: swallow mode gives a silent loss (noticed: no) naming Widget, controller, trace and span`, async () => {
      const event = await loseStatusWrite(swallow, `${fault.name}-swallow`, fault);
      await assertJoined(swallow, `${fault.name}-swallow`, fault, event);
    });
    it(`${fault.name}: correct mode gives a noticed loss (noticed: yes), and its retry lands`, async () => {
      const name = `${fault.name}-correct`;
      const event = await loseStatusWrite(correct, name, fault);
      await assertJoined(correct, name, fault, event);
      await waitFor(`the retried status of correct/${name}`, () => stack.statusOf("correct", name)?.observedGeneration === 1, 15_000);
    });
  }

  it("a 409 on a status write is one http_rejected event, not more", async () => {
    // Past the correlation window, nothing else may name these writes.
    await new Promise((r) => setTimeout(r, 2500));
    for (const name of ["conflict-swallow", "conflict-correct"]) {
      const named = stack.agent.events.filter((e) => e.reconcile?.name === name);
      assert.equal(named.length, 1, `events naming ${name}: ${JSON.stringify(named)}`);
    }
  });

  it("two status writes in flight on one connection, one faulted: the reset kills both, one event each, each naming its Widget", async () => {
    await warm(swallow);
    const faulted = "concurrent-a";
    const bystander = "concurrent-b";
    // The bystander's write is held by the apiserver, so it is in flight on the
    // same HTTP/2 connection when the faulted write's reset kills it: both are lost.
    stack.apiserver.control.addRule({ id: "hold-b", method: "PATCH", path: `*${statusPath("swallow", bystander)}`, action: "delay", for: "3s" });
    stack.apiserver.control.addRule({ id: "reset-a", method: "PATCH", path: `*${statusPath("swallow", faulted)}`, action: "reset" });
    stack.createWidget("swallow", bystander);
    await waitFor("the bystander's write to be held", () => stack.apiserver.faultLog().some((f) => f.rule === "hold-b"), 10_000);
    stack.createWidget("swallow", faulted);
    const lossesOf = (name: string) => stack.agent.events.filter((e) => e.cause === "connection_reset" && e.pid === swallow.pid && e.reconcile?.name === name);
    await waitFor("a loss event for each write", () => lossesOf(faulted).length > 0 && lossesOf(bystander).length > 0, 15_000);
    for (const name of [faulted, bystander]) {
      const events = lossesOf(name);
      const context = JSON.stringify(events);
      assert.equal(events.length, 1, `one event per lost write: ${context}`);
      assert.equal(events[0]!.correlation, "span", context);
      assert.equal(events[0]!.request?.path, statusPath("swallow", name), context);
    }
    assert.notEqual(lossesOf(faulted)[0]!.span_id, lossesOf(bystander)[0]!.span_id);
    assert.equal(stack.agent.events.filter((e) => e.correlation === "ambiguous" && e.pid === swallow.pid).length, 0, "nothing ambiguous");
  });

  it("the /events WebSocket and `lostwrite tail --json` deliver the same events as the event log", async () => {
    const logged = stack.agent.events;
    assert.ok(logged.length >= FAULTS.length * 2, `events so far: ${logged.length}`);
    await waitFor("the feed to catch up", () => feed.length >= logged.length, 5000);
    assert.deepEqual(feed, logged);

    // tail replays from the agent's ring with --since, then follows live.
    const tail = spawn(path.join(repoRoot, "node_modules/.bin/node"),
      [path.join(repoRoot, "agent/src/cli.ts"), "tail", "--json", "--since", startedAt, `${stack.agent.url.replace(/^http/, "ws")}/events`],
      { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    tail.stdout.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
    tail.stderr.setEncoding("utf8").on("data", (chunk: string) => (err += chunk));
    const exited = new Promise<void>((resolve) => tail.once("exit", () => resolve()));
    try {
      await waitFor("tail to print every event", () => out.split("\n").filter(Boolean).length >= logged.length, 15_000);
    } finally {
      tail.kill("SIGINT");
      await exited;
    }
    const printed = out.split("\n").filter(Boolean).map((line) => JSON.parse(line) as LossEvent);
    assert.deepEqual(printed, logged, err);
  });

  it("forwarded both operators' spans to the trace backend, and dropped none", async () => {
    const services = await stack.traces.services();
    assert.deepEqual(services.filter((s) => s !== "lostwrite").sort(), [correct.serviceName, swallow.serviceName].sort());
    assert.equal(await stack.agent.metric("lostwrite_events_dropped_total", { stage: "otlp_forward" }), 0);
    assert.equal(await stack.agent.metric("lostwrite_probe_parse_errors_total"), 0);
  });
});
