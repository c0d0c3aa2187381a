// The testbed Go operator (testbed/go-operator) under faults, for the e2e
// tests that judge the agent's Go request path: start an operator binary
// followed by the agent's Go probe, make it write one status PATCH with a
// fault injected by the testbed apiserver, and check the one event the agent
// reports for it. Shared by goRequests (the families, the deployed shape)
// and goMatrix (every Go and x/net version of the support matrix).
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import type { Apiserver } from "../../../../testbed/apiserver/apiserver.ts";
import type { RuleInput } from "../../../../testbed/apiserver/scenario.ts";
import { formatHostPort } from "../../../src/hostPort.ts";
import type { LossEvent } from "../../../src/model.ts";
import { waitFor, type AgentProcess, type LogLine } from "./agentProcess.ts";

const WIDGETS = "demo.lostwrite.dev/v1/widgets";
/** The operator's timeout for one status write. */
export const WRITE_TIMEOUT = "1s";

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Whether the agent logged that a Go probe program follows `pid`, or no
 * longer does. Per pid, not a count of programs: one program follows every
 * process of its binary.
 */
export const loggedFor = (log: LogLine[], msg: "Go probe follows" | "Go probe no longer follows", pid: number): boolean =>
  log.some((line) => line.msg === msg && line.pid === pid);

export interface Operator {
  child: ChildProcess;
  pid: number;
  namespace: string;
  stop(): Promise<void>;
}

/** Which of the operator's clients writes: golang.org/x/net/http2's Transport (client-go's) or net/http's. */
export type OperatorClient = "xnet" | "std";

/** One fault's verdict, for the tables the tests print. */
export interface FaultRow {
  fault: string;
  expected: string;
  detected: string;
}

export type GoOperatorFaults = ReturnType<typeof goOperatorFaults>;

/**
 * followTimeoutMs: how long a Go program may take to follow a new operator
 * (its compile and the kernel's verifier: seconds here, a minute under
 * software emulation, where the kernel smoke suite runs).
 */
export function goOperatorFaults(api: Apiserver, agent: AgentProcess, agentLog: LogLine[], { followTimeoutMs = 30_000 } = {}) {
  let widgetSeq = 0;

  async function startOperator(binary: string, client: OperatorClient, namespace: string, timeout = WRITE_TIMEOUT): Promise<Operator> {
    const child = spawn(binary, [
      "--server", api.url, "--namespace", namespace, "--mode", "swallow", "--family", client,
      "--timeout", timeout, "--otlp", `http://127.0.0.1:${agent.otlpPort}`,
    ], { stdio: ["ignore", "pipe", "inherit"] });
    const pid = child.pid!;
    const stop = async (): Promise<void> => {
      if (child.exitCode === null) {
        child.kill("SIGKILL");
        await new Promise((resolve) => child.once("exit", resolve));
      }
      await waitFor(`the Go probe to let the stopped operator [${pid}] go`, () => loggedFor(agentLog, "Go probe no longer follows", pid), 30_000);
    };
    // Followed by its binary's program: uprobes on the binary, reporting for its pid.
    try {
      await waitFor(`the Go probe of ${path.basename(binary)} to follow [${pid}]`, () => loggedFor(agentLog, "Go probe follows", pid), followTimeoutMs);
    } catch (err) {
      // Not left running: its retrying watch would keep the test process alive.
      child.kill("SIGKILL");
      throw err;
    }
    assert.ok((await agent.metric("lostwrite_go_probes_attached")) >= 1, "an attached program is counted");
    return { child, pid, namespace, stop };
  }

  /** A new widget the operator reconciles at once (its watch sees it): one status PATCH, faulted by `rule`. */
  function statusWrite(op: Operator, rule: { action: RuleInput["action"]; [key: string]: unknown } | null): { name: string; path: string } {
    const name = `w${++widgetSeq}`;
    const statusPath = `/apis/demo.lostwrite.dev/v1/namespaces/${op.namespace}/widgets/${name}/status`;
    if (rule) api.control.addRule({ ...rule, method: "PATCH", path: statusPath });
    api.store.commit(WIDGETS, { apiVersion: "demo.lostwrite.dev/v1", kind: "Widget", metadata: { name, namespace: op.namespace, generation: 1 }, spec: { size: 1 } });
    return { name, path: statusPath };
  }

  const eventsFor = (statusPath: string): LossEvent[] => agent.events.filter((e) => e.request?.path === statusPath);
  const landed = (op: Operator, name: string): boolean =>
    (api.store.get(WIDGETS, op.namespace, name)?.status as { observedGeneration?: number } | undefined)?.observedGeneration === 1;

  /** Waits for the one event of a lost write, then a little longer: a second one (an echo) must not follow. */
  async function oneLoss(op: Operator, statusPath: string, name: string): Promise<LossEvent> {
    await waitFor(`the loss of ${statusPath}`, () => eventsFor(statusPath).length > 0, 20_000);
    await sleep(2500); // the point: a second event of the same loss (an echo) would have come by now, and must not
    const events = eventsFor(statusPath);
    assert.equal(events.length, 1, `one lost request, one event: ${JSON.stringify(events)}`);
    const event = events[0]!;
    assert.equal(event.pid, op.pid);
    assert.equal(event.request?.method, "PATCH");
    assert.equal(typeof event.request?.stream_id, "number");
    assert.deepEqual(event.request?.object, { namespace: op.namespace, resource: "widgets", name, subresource: "status" });
    assert.equal(event.apiserver, formatHostPort(api.host, api.port));
    const socketPath = agent.events.filter((e) => e.pid === op.pid && e.request === null);
    assert.deepEqual(socketPath, [], "the socket path's view of the same deaths is folded into the requests' events");
    return event;
  }

  const describeEvent = (event: LossEvent): string =>
    `${event.cause}${event.request?.status_code ? ` ${event.request.status_code}` : ""} ${event.request?.method} …/${event.request?.object?.name}/${event.request?.object?.subresource}`;

  /**
   * The faults every variant must get right — a reset and a close while the
   * watch streams, a rejection, a stream reset, a hung write — each reported
   * once, by path;
   * the rows say what was expected and detected.
   */
  async function coreVerdicts(op: Operator): Promise<FaultRow[]> {
    const rows: FaultRow[] = [];
    const reset = statusWrite(op, { action: "reset" });
    const resetEvent = await oneLoss(op, reset.path, reset.name);
    assert.equal(resetEvent.cause, "connection_reset");
    // The swallow operator's reconcile span says all went well: a silent loss, matched to its span by its path.
    assert.deepEqual([resetEvent.correlation, resetEvent.noticed, resetEvent.reconcile?.name], ["span", "no", reset.name], JSON.stringify(resetEvent));
    rows.push({ fault: "reset", expected: "connection_reset PATCH …/status, silent", detected: `${describeEvent(resetEvent)}, noticed=${resetEvent.noticed}` });

    const closedConnections = (): Promise<number> => agent.metric("lostwrite_apiserver_connection_losses_total", { reason: "closed_unanswered" });
    const closedBefore = await closedConnections();
    const closed = statusWrite(op, { action: "close" });
    const closedEvent = await oneLoss(op, closed.path, closed.name);
    assert.equal(closedEvent.cause, "connection_closed_unanswered");
    // The connection as well: its watch was answered long ago, the PATCH was not.
    assert.equal((await closedConnections()) - closedBefore, 1, "one connection closed by the apiserver with a request unanswered");
    rows.push({ fault: "close while the watch streams", expected: "connection_closed_unanswered PATCH …/status", detected: describeEvent(closedEvent) });

    const rejected = statusWrite(op, { action: "status", code: 409 });
    const rejectedEvent = await oneLoss(op, rejected.path, rejected.name);
    assert.deepEqual([rejectedEvent.cause, rejectedEvent.request?.status_code], ["http_rejected", 409]);
    rows.push({ fault: "409", expected: "http_rejected 409 PATCH …/status", detected: describeEvent(rejectedEvent) });

    const streamReset = statusWrite(op, { action: "rst_stream" });
    const streamResetEvent = await oneLoss(op, streamReset.path, streamReset.name);
    assert.equal(streamResetEvent.cause, "stream_reset");
    rows.push({ fault: "RST_STREAM (INTERNAL_ERROR)", expected: "stream_reset PATCH …/status", detected: describeEvent(streamResetEvent) });

    const hung = statusWrite(op, { action: "delay", for: 3000 });
    const hungEvent = await oneLoss(op, hung.path, hung.name);
    assert.equal(hungEvent.cause, "client_gave_up");
    assert.ok((hungEvent.unanswered_for_ms ?? 0) >= 900, `waited the client's timeout: ${hungEvent.unanswered_for_ms} ms`);
    rows.push({ fault: "hung write, client times out", expected: "client_gave_up PATCH …/status", detected: describeEvent(hungEvent) });
    return rows;
  }

  return { startOperator, statusWrite, eventsFor, landed, oneLoss, coreVerdicts };
}
