// On the real kernel, against a real control plane (testbed/controlplane:
// etcd and kube-apiserver v1.37 built from source, the Widget CRD, RBAC,
// client certificates), the real controller-runtime operator
// (testbed/cr-operator, Status().Update()) followed by the agent's uprobes on
// its binary. No fault is simulated by a stand-in: each comes from what
// produces it in production — another writer of the same status, the CRD's
// schema, a webhook too slow for its timeout, a connection destroyed in the
// kernel, a partition, the apiserver killed or shut down, its HTTP/2
// rebalancing, API Priority and Fairness — and must be reported exactly
// once, by its cause, its request (a status write, its path and object) and
// whether the operator noticed, from its spans — or not at all, where the
// write was retried and answered.
//
// A holding webhook (testbed/controlplane/holdingWebhook.ts) keeps the one
// write a fault is aimed at in flight inside the apiserver until the fault is
// in place: the test waits for that write to arrive, never for a sleep.
//
// Two operators share the binary: `careful` returns a failed write's error
// (controller-runtime requeues it), `silent` logs it and reports success.
//
// Needs nftables (`nft`) for the partition, as .ci/run installs it.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { buildControlPlane } from "../../../testbed/controlplane/build.ts";
import { startControlPlane, type ControlPlane } from "../../../testbed/controlplane/controlPlane.ts";
import { startHoldingWebhook, type HoldingWebhook } from "../../../testbed/controlplane/holdingWebhook.ts";
import { WIDGET_GROUP, WIDGET_VERSION } from "../../../testbed/controlplane/widgets.ts";
import { buildCrOperator } from "../../../testbed/cr-operator/build.ts";
import { goUnavailable } from "../../../testbed/goBuild.ts";
import type { LossEvent } from "../../src/model.ts";
import type { PrintfRecordOf } from "../../src/sources/probe/probeLines.ts";
import { parseProbeLine } from "../../src/sources/probe/probeOutput.ts";
import { startAgentProcess, waitFor, type AgentProcess, type LogLine } from "./support/agentProcess.ts";
import { operatorCmdline, startCrOperator, type CrOperator, type CrOperatorMode } from "./support/crOperator.ts";
import { loggedFor } from "./support/goOperatorFaults.ts";
import { assertKernelRequirements, skipWithoutKernelOrGo } from "./support/kernelRequirements.ts";

/** The agent's correlation window: how long it waits for the spans that say whether a loss was noticed. */
const CORRELATION_WINDOW = "2s";
/** Past the correlation window: a second event of the same loss (an echo) would have come by now, and must not. */
const SETTLE_MS = 3000;
const OPERATOR_USER = "cr-operator";
/**
 * client-go's HTTP/2 health check, as a real operator tunes it: k8s.io/apimachinery's
 * util/net (v0.37, SetTransportDefaults) sets x/net's ReadIdleTimeout from
 * HTTP2_READ_IDLE_TIMEOUT_SECONDS (default 30) and PingTimeout from
 * HTTP2_PING_TIMEOUT_SECONDS (default 15), read from the process's environment
 * (a Deployment's `env`); neither controller-runtime nor rest.Config has a
 * setting of its own. The careful operator runs with shorter ones, so that a
 * partitioned connection is given up in at most 10 s instead of 45.
 */
const HEALTH_CHECK_ENV = { HTTP2_READ_IDLE_TIMEOUT_SECONDS: "5", HTTP2_PING_TIMEOUT_SECONDS: "5" };
/** Widgets with this label get the slow webhook too (its object selector). */
const SLOW_WEBHOOK_LABEL = { "demo.lostwrite.dev/admission": "slow" };
const SLOW_WEBHOOK = "slow.widgets.demo.lostwrite.dev";
/** HTTP/2 GOAWAY error codes (RFC 9113 §7) the test names. */
const H2_ERROR_NAMES: Record<number, string> = { 0: "NO_ERROR", 1: "PROTOCOL_ERROR", 2: "INTERNAL_ERROR" };

/** Copies a file out of the test's directory (removed at the end) for CP_E2E_DEBUG. */
function copyKept(file: string): string {
  const kept = path.join(os.tmpdir(), `lostwrite-realcp-${process.pid}-${path.basename(file)}`);
  copyFileSync(file, kept);
  return kept;
}
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const widgetsPath = (namespace: string): string => `/apis/${WIDGET_GROUP}/${WIDGET_VERSION}/namespaces/${namespace}/widgets`;
const statusPathOf = (namespace: string, name: string): string => `${widgetsPath(namespace)}/${name}/status`;

interface Row {
  fault: string;
  expected: string;
  detected: string;
}

interface Expected {
  cause: LossEvent["cause"];
  statusCode?: number;
  noticed: "yes" | "no";
}

// Built first: a machine's first build of etcd and kube-apiserver takes many minutes
// (`npm test` builds them before the e2e files; testbed/README.md has the times).
describe("the real kube-apiserver: status writes lost as production loses them, each reported once", { skip: skipWithoutKernelOrGo(), timeout: 45 * 60_000 }, () => {
  let dir: string;
  let cp: ControlPlane;
  let webhook: HoldingWebhook;
  let agent: AgentProcess;
  let agentLog: LogLine[];
  let operatorBinary: string;
  let kubeconfigPath: string;
  let recording: string;
  /** Undoes a partition still in place (a failed test): run by after() too. */
  let heal: (() => void) | null = null;
  let goProbeRestartsBefore: number;
  const operators = {} as Record<CrOperatorMode, CrOperator>;
  const rows: Row[] = [];

  before(async () => {
    assertKernelRequirements();
    const go = goUnavailable();
    if (go !== null) throw new Error(`e2e test cannot run: ${go}`);
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-realcp-"));
    const log = (line: string): void => console.log(`# ${line}`);
    const binaries = await buildControlPlane(log);
    operatorBinary = await buildCrOperator(dir, { stripped: false });
    const started = Date.now();
    cp = await startControlPlane({ binaries, log });
    log(`control plane started in ${((Date.now() - started) / 1000).toFixed(1)} s (etcd, kube-apiserver, the Widget CRD served)`);
    webhook = await startHoldingWebhook(cp);
    await webhook.install(cp);
    ({ kubeconfigPath } = await cp.kubeconfigFor(OPERATOR_USER));
    // The probe lines, kept to read what the Go probe saw of a GOAWAY (its last stream id and error code).
    recording = path.join(dir, "agent.jsonl");
    agent = await startAgentProcess([
      "--target-cmdline", operatorCmdline(kubeconfigPath),
      "--apiserver", `127.0.0.1:${cp.port}`,
      "--correlation-window", CORRELATION_WINDOW,
      // The default span grace: a new operator's first spans may still be in
      // its exporter's batch when its first write is lost.
      "--record", recording,
    ]);
    agentLog = agent.log;
    operators.careful = await startOperator("careful");
    operators.silent = await startOperator("silent");
    goProbeRestartsBefore = await agent.metric("lostwrite_go_probe_restarts_total");
  });

  after(async () => {
    heal?.();
    for (const op of Object.values(operators)) {
      rows.push({ fault: `no fault: the ${op.mode} operator's first write`, expected: "no event", detected: describeEvents(eventsFor(statusPathOf(op.namespace, "answered"))) });
    }
    if (rows.length > 0) {
      console.log(`# real kube-apiserver, expected vs detected\n${rows.map((r) => `#   ${r.fault.padEnd(44)} expected: ${r.expected.padEnd(58)} detected: ${r.detected}`).join("\n")}`);
    }
    if (process.env.CP_E2E_DEBUG) {
      console.error(agent?.stderr.filter((l) => !l.includes("boundary")).join("\n"), JSON.stringify(agent?.events, null, 1));
      for (const op of Object.values(operators)) console.error(`${op.mode} operator:\n${op.stderr.join("")}`);
      if (recording) console.error(`the agent's recording, kept: ${copyKept(recording)}`);
    }
    for (const op of Object.values(operators)) await op.stop().catch((error: unknown) => console.error(String(error)));
    await agent?.stop();
    await webhook?.close();
    await cp?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function startOperator(mode: CrOperatorMode): Promise<CrOperator> {
    const namespace = `cp-${mode}`;
    await cp.ensureNamespace(namespace);
    const op = await startCrOperator({
      binary: operatorBinary, kubeconfigPath, mode, namespace, otlpPort: agent.otlpPort, agentLog, env: mode === "careful" ? HEALTH_CHECK_ENV : {},
    });
    // One answered status write before any fault, as the other operator e2e tests make (the table holds it: no event).
    await createWidget(op, "answered");
    await waitFor(`the ${mode} operator's first status write to land`, () => landed(op, "answered"), 20_000);
    return op;
  }

  async function createWidget(op: CrOperator, name: string, spec: Record<string, unknown> = { size: 1 }, labels: Record<string, string> = {}): Promise<void> {
    const res = await cp.request("POST", widgetsPath(op.namespace), {
      body: { apiVersion: `${WIDGET_GROUP}/${WIDGET_VERSION}`, kind: "Widget", metadata: { name, labels }, spec },
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
  }

  async function statusOf(op: CrOperator, name: string): Promise<{ observedGeneration?: number; phase?: string; conditions?: { type: string }[] } | undefined> {
    const res = await cp.request("GET", `${widgetsPath(op.namespace)}/${name}`);
    return (res.body as { status?: { observedGeneration?: number; phase?: string } }).status;
  }
  const landed = async (op: CrOperator, name: string): Promise<boolean> => (await statusOf(op, name))?.observedGeneration === 1;

  const lossCount = (): Promise<number> => agent.metric("lostwrite_status_write_lost_total", { request: "status" });
  const eventsFor = (statusPath: string): LossEvent[] => agent.events.filter((e) => e.request?.path === statusPath);
  const describeEvents = (events: LossEvent[]): string =>
    events.length === 0
      ? "no event"
      : events.map((e) => `${e.cause}${e.request?.status_code ? ` ${e.request.status_code}` : ""} ${e.request?.method ?? "?"} …/${e.request?.object?.name ?? "?"}/status noticed=${e.noticed}${e.correlation === "span" ? " +span" : ""}`).join("; ");

  /**
   * The Go probe followed both operators throughout and never restarted: every
   * verdict here is its own (by request), never the socket path's stand-in for
   * a process it does not follow.
   */
  async function assertGoProbeFollowed(): Promise<void> {
    assert.equal(await agent.metric("lostwrite_go_probe_restarts_total"), goProbeRestartsBefore,
      `no Go probe restart: ${JSON.stringify(agentLog.filter((l) => l.msg.endsWith("; restarting")))}`);
    for (const op of Object.values(operators)) {
      assert.ok(!loggedFor(agentLog, "Go probe no longer follows", op.pid), `the Go probe still follows the ${op.mode} operator [${op.pid}]`);
    }
  }

  /**
   * Waits for the loss of `name`'s status write, then past the correlation
   * window, and holds that exactly one event came of it, with the cause, the
   * request, the object, the operator's verdict from its reconcile span, and
   * one more status loss on the metric; returns the events that came meanwhile
   * for anything else.
   */
  async function oneLoss(fault: string, op: CrOperator, name: string, expected: Expected, since: number, lostBefore: number): Promise<LossEvent[]> {
    const statusPath = statusPathOf(op.namespace, name);
    const expectedText = `${expected.cause}${expected.statusCode ? ` ${expected.statusCode}` : ""} PUT …/${name}/status noticed=${expected.noticed} +span`;
    try {
      await waitFor(`the loss of ${statusPath}`, () => eventsFor(statusPath).length > 0, 30_000);
    } finally {
      // The row is printed even when the wait fails: detected "no event".
      rows.push({ fault, expected: expectedText, detected: "" });
    }
    await sleep(SETTLE_MS); // the point: a second event of the same loss (an echo) would have come by now, and must not
    const events = eventsFor(statusPath);
    rows.at(-1)!.detected = describeEvents(events);
    await assertGoProbeFollowed();
    assert.equal(events.length, 1, `one lost write, one event: ${JSON.stringify(events)}`);
    const event = events[0]!;
    assert.equal(event.cause, expected.cause, JSON.stringify(event));
    if (expected.statusCode) assert.equal(event.request?.status_code, expected.statusCode);
    assert.equal(event.pid, op.pid);
    assert.equal(event.apiserver, `127.0.0.1:${cp.port}`);
    assert.equal(event.request?.method, "PUT", "Status().Update() is a PUT to …/status");
    assert.deepEqual(event.request?.object, { namespace: op.namespace, resource: "widgets", name, subresource: "status" });
    assert.equal(event.correlation, "span", JSON.stringify(event));
    assert.deepEqual(event.reconcile, { controller: "widget", namespace: op.namespace, name, kind: "Widget" });
    assert.equal(event.noticed, expected.noticed, op.mode === "silent" ? "the reconcile span says OK: a silent loss" : "the reconcile span says ERROR");
    assert.equal((await lossCount()) - lostBefore, 1, 'one more lostwrite_status_write_lost_total{request="status"}');
    return agent.events.slice(since).filter((e) => e !== event);
  }

  /** The Go probe's lines of `kind` for `pid`, as the agent recorded them (--record), parsed as the agent parses them (a merged program's line carries its part's tag). */
  function goLines<K extends "go_goaway" | "go_request" | "go_path">(kind: K, pid: number): PrintfRecordOf<K>[] {
    const out: PrintfRecordOf<K>[] = [];
    for (const text of readFileSync(recording, "utf8").split("\n")) {
      if (!text.includes(`${kind} `)) continue;
      const record = JSON.parse(text) as { kind: string; line: string };
      if (record.kind !== "goProbe") continue;
      const parsed = parseProbeLine(record.line);
      if (!parsed.ok || parsed.record.type !== kind) continue;
      const line = parsed.record as unknown as PrintfRecordOf<K>;
      if (line.pid === pid) out.push(line);
    }
    return out;
  }

  /** The HTTP/2 stream id the operator's write to `statusPath` was sent on (the latest such write), from the Go probe's lines. */
  function streamIdOf(pid: number, statusPath: string): { conn: bigint; streamId: number } | undefined {
    const streams = new Set(goLines("go_path", pid).filter((p) => p.offset === 0 && p.part.startsWith(statusPath)).map((p) => p.stream));
    const request = goLines("go_request", pid).filter((r) => streams.has(r.stream)).at(-1);
    return request && { conn: request.conn, streamId: request.streamId };
  }

  /** The operator's one connection to the apiserver, by its local port, from the kernel's socket table. */
  function operatorSockets(op: CrOperator): string[] {
    const out = execFileSync("ss", ["-tnpH", "state", "established", "dport", "=", `:${cp.port}`], { encoding: "utf8" });
    return out.split("\n").filter((line) => line.includes(`pid=${op.pid},`)).map((line) => line.trim().split(/\s+/)[2]!);
  }

  it("409: a second replica of the operator writes the same status while the first one's Status().Update() is in flight", async () => {
    // Why the real apiserver: the conflict is etcd's compare-and-swap failing under the write and the registry's retry finding a newer resourceVersion.
    const op = operators.careful;
    const name = "conflict";
    const since = agent.events.length;
    const lostBefore = await lossCount();
    const hold = webhook.hold({ namespace: op.namespace, name, user: OPERATOR_USER });
    await createWidget(op, name);
    await hold.arrived;
    // The other writer: a second replica (leader election off) that reconciled the same generation, by merge
    // patch (no resourceVersion: it cannot conflict). The first replica's requeued reconcile then finds the
    // status current and writes nothing, so its refused write is not retried: a loss, which its span noticed.
    const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    const other = await cp.request("PATCH", statusPathOf(op.namespace, name), {
      contentType: "application/merge-patch+json",
      body: { status: { observedGeneration: 1, phase: "Ready", conditions: [{ type: "Ready", status: "True", reason: "Reconciled", message: "by the second replica", observedGeneration: 1, lastTransitionTime: now }] } },
    });
    assert.equal(other.status, 200, JSON.stringify(other.body));
    hold.release();
    const others = await oneLoss("409 from a concurrent status writer", op, name, { cause: "http_rejected", statusCode: 409, noticed: "yes" }, since, lostBefore);
    assert.equal((await statusOf(op, name) as { conditions?: { message?: string }[] } | undefined)?.conditions?.[0]?.message, "by the second replica", "the other replica's status stands");
    assert.deepEqual(others, [], "nothing else was reported");
  });

  it("422: the CRD's status schema rejects the phase the operator writes for a paused Widget; swallowed, the status never lands", async () => {
    // Why the real apiserver: the 422 is the apiextensions-apiserver's OpenAPI validation of the CRD's status schema.
    const op = operators.silent;
    const name = "paused";
    const since = agent.events.length;
    const lostBefore = await lossCount();
    await createWidget(op, name, { size: 1, paused: true });
    const others = await oneLoss("422 from the CRD's status schema", op, name, { cause: "http_rejected", statusCode: 422, noticed: "no" }, since, lostBefore);
    assert.equal(await statusOf(op, name), undefined, "the status was never written");
    assert.deepEqual(others, [], "nothing else was reported");
    // Deleted: every re-list (after the apiserver restarts, below) reconciles it again, and each write is a new 422.
    assert.equal((await cp.request("DELETE", `${widgetsPath(op.namespace)}/${name}`)).status, 200);
  });

  it("a validating webhook times out on the status write (timeoutSeconds 1, failurePolicy Fail): the apiserver's 500 reported as a rejected write; swallowed, the status never lands", async () => {
    // Why the real apiserver: the webhook call, its timeout and the error the apiserver answers in its place are the admission chain's own; the stand-in has no admission.
    const op = operators.silent;
    const name = "slow-admission";
    await webhook.install(cp, { name: SLOW_WEBHOOK, timeoutSeconds: 1, objectSelector: { matchLabels: SLOW_WEBHOOK_LABEL } });
    const since = agent.events.length;
    const lostBefore = await lossCount();
    const hold = webhook.hold({ namespace: op.namespace, name, user: OPERATOR_USER, webhook: SLOW_WEBHOOK });
    try {
      await createWidget(op, name, { size: 1 }, SLOW_WEBHOOK_LABEL);
      await hold.arrived;
      // The webhook never answers in time: after 1 s the apiserver gives up on it and, failing closed, answers the write itself.
      const others = await oneLoss("validating webhook timed out (failurePolicy Fail)", op, name, { cause: "http_rejected", statusCode: 500, noticed: "no" }, since, lostBefore);
      assert.deepEqual(others, [], "nothing else was reported: the connection lives on");
    } finally {
      hold.release();
      await webhook.uninstall(cp, SLOW_WEBHOOK);
    }
    assert.equal(await statusOf(op, name), undefined, "the status was never written");
    const logged = op.stderr.join("");
    assert.ok(logged.includes("failed calling webhook") && logged.includes(SLOW_WEBHOOK), "the operator got the apiserver's error for the webhook it gave up on");
    // Deleted: a later re-list would reconcile it again, and its write would land (the slow webhook is gone), as no loss but a confusing one.
    assert.equal((await cp.request("DELETE", `${widgetsPath(op.namespace)}/${name}`)).status, 200);
  });

  /** Destroys one end of the operator's connection in the kernel (ss -K): the apiserver's end (the operator then receives a reset) or its own. */
  function destroyConnection(op: CrOperator, end: "apiserver" | "operator"): void {
    const sockets = operatorSockets(op);
    assert.equal(sockets.length, 1, `the operator has one connection to the apiserver: ${sockets.join(", ")}`);
    const localPort = sockets[0]!.split(":").at(-1)!;
    const filter = end === "operator"
      ? ["sport", "=", `:${localPort}`, "dport", "=", `:${cp.port}`]
      : ["sport", "=", `:${cp.port}`, "dport", "=", `:${localPort}`];
    const out = execFileSync("ss", ["-K", "-tnH", "state", "established", ...filter], { encoding: "utf8" });
    assert.equal(out.trim().split("\n").filter(Boolean).length, 1, `ss -K destroyed one socket: ${out}`);
  }

  it("the connection reset under an in-flight status write (ss -K on the apiserver's end: the operator gets an RST, as from a load balancer); the requeued write lands", async () => {
    // Why the real apiserver: the dead connection carries client-go's watches too, and the real apiserver's answer to their re-list and re-watch is what the operator resumes on.
    const op = operators.careful;
    const name = "reset";
    const since = agent.events.length;
    const lostBefore = await lossCount();
    const hold = webhook.hold({ namespace: op.namespace, name, user: OPERATOR_USER });
    await createWidget(op, name);
    await hold.arrived;
    destroyConnection(op, "apiserver");
    hold.release();
    const others = await oneLoss("connection reset (ss -K, apiserver's end)", op, name, { cause: "connection_reset", noticed: "yes" }, since, lostBefore);
    await waitFor(`${name}'s requeued write to land`, () => landed(op, name), 30_000);
    assert.deepEqual(others, [], "nothing else was reported");
  });

  it("the operator's own socket destroyed under an in-flight status write (ss -K on its end: ECONNABORTED); swallowed", async () => {
    // Why the real apiserver: as above; here the operator's kernel aborts the socket and sends the RST to the apiserver, which must clean up the request itself.
    const op = operators.silent;
    const name = "aborted";
    const since = agent.events.length;
    const lostBefore = await lossCount();
    const hold = webhook.hold({ namespace: op.namespace, name, user: OPERATOR_USER });
    await createWidget(op, name);
    await hold.arrived;
    destroyConnection(op, "operator");
    hold.release();
    // The agent has no cause of its own for a socket aborted on the operator's side: the connection died unanswered without a FIN, as a reset.
    const others = await oneLoss("operator's socket destroyed (ss -K, its end)", op, name, { cause: "connection_reset", noticed: "no" }, since, lostBefore);
    assert.deepEqual(others, [], "nothing else was reported");
  });

  /** Whether any socket of the kernel's table (any state) has local port `port`. */
  function socketExists(port: number): boolean {
    return execFileSync("ss", ["-tanH", "sport", "=", `:${port}`], { encoding: "utf8" }).trim() !== "";
  }

  /**
   * Cuts the operator's one connection off the apiserver: nftables drops, at
   * the input hook, every packet between its local port and the apiserver's
   * port, both ways, as a network that stopped carrying them. Nothing else
   * on the machine has that port pair: its next connection (another local
   * port) goes through.
   */
  function partition(op: CrOperator): { localPort: number; dropped(): number; heal(): void } {
    const sockets = operatorSockets(op);
    assert.equal(sockets.length, 1, `the operator has one connection to the apiserver: ${sockets.join(", ")}`);
    const localPort = Number(sockets[0]!.split(":").at(-1));
    const table = `lostwrite_partition_${process.pid}`;
    const match = (from: number, to: number): string => `ip saddr 127.0.0.1 ip daddr 127.0.0.1 tcp sport ${from} tcp dport ${to} counter drop`;
    execFileSync("nft", ["-f", "-"], {
      input: `table inet ${table} {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\t\t${match(localPort, cp.port)}\n\t\t${match(cp.port, localPort)}\n\t}\n}\n`,
    });
    let healed = false;
    const cut = {
      localPort,
      dropped: (): number => {
        const listed = JSON.parse(execFileSync("nft", ["-j", "list", "table", "inet", table], { encoding: "utf8" })) as { nftables: { rule?: { expr: { counter?: { packets: number } }[] } }[] };
        return listed.nftables.flatMap((item) => item.rule?.expr ?? []).reduce((sum, expr) => sum + (expr.counter?.packets ?? 0), 0);
      },
      heal: (): void => {
        if (healed) return;
        healed = true;
        heal = null;
        execFileSync("nft", ["delete", "table", "inet", table]);
      },
    };
    heal = cut.heal;
    return cut;
  }

  it("a network partition: every packet of the operator's connection dropped (nftables) with a status write in flight, until client-go's HTTP/2 health check gives up on it; the requeued write lands", async () => {
    // Why the real apiserver: the write is inside the real apiserver when the network goes, and the PING client-go's health check sends unanswered is to the real apiserver's HTTP/2 server.
    const op = operators.careful;
    const name = "partitioned";
    const since = agent.events.length;
    const lostBefore = await lossCount();
    const hold = webhook.hold({ namespace: op.namespace, name, user: OPERATOR_USER });
    await createWidget(op, name);
    await hold.arrived;
    const cut = partition(op);
    const cutAt = Date.now();
    let others: LossEvent[];
    let dropped: number;
    try {
      // The write stays held until the connection is given up (no answer could have crossed the partition anyway); the
      // requeued write goes on a new connection, which the partition does not cut. The health check gives up after
      // ReadIdleTimeout (5 s without a frame read: then a PING) plus PingTimeout (5 s without its ACK). Go then closes
      // the connection itself (the Go probe reads it in FIN_WAIT1), and the agent names what it was: a connection that
      // died unanswered, the network path's or the apiserver's (docs/go-requests.md), not a client timeout.
      others = await oneLoss("network partition (nftables), health check gave up", op, name, { cause: "connection_closed_unanswered", noticed: "yes" }, since, lostBefore);
      dropped = cut.dropped();
    } finally {
      cut.heal();
      hold.release();
    }
    const gaveUpS = (Date.parse(eventsFor(statusPathOf(op.namespace, name))[0]!.time) - cutAt) / 1000;
    rows.at(-1)!.detected += ` (${gaveUpS.toFixed(1)} s after the cut, ${dropped} packets dropped)`;
    assert.ok(dropped > 0, "the partition dropped packets (the health check's PING among them)");
    // x/net's error for a connection its health check gave up (closeForLostPing), not a timeout of the TCP stack's or the webhook's.
    assert.match(op.stderr.join(""), /http2: client connection lost/, "the operator's write failed with x/net's lost-PING error");
    // Go closed its socket, whose FIN (and PING) the kernel retransmits into the partition: healed, the connection
    // ends for good (the apiserver's retransmission meets a closed socket). Waited for, so that whatever the agent
    // makes of its end has come before the check below.
    await waitFor("the partitioned connection to leave the kernel's socket table", () => !socketExists(cut.localPort), 60_000);
    await waitFor(`${name}'s requeued write to land`, () => landed(op, name), 30_000);
    await sleep(SETTLE_MS); // past the correlation window: an event of the connection's end would have come by now, and must not
    assert.deepEqual([...others, ...agent.events.slice(since).filter((e) => e.request?.path !== statusPathOf(op.namespace, name))], [], "nothing else was reported");
  });

  it("the apiserver SIGKILLed with a status write in flight, then restarted; swallowed: one loss, and the refused reconnects reported as the reads they were", async () => {
    // Why the real apiserver: only a real apiserver process can die with the write inside it, and only a real one's restart (etcd behind it) is what the operator comes back to.
    const op = operators.silent;
    const name = "killed";
    const since = agent.events.length;
    const lostBefore = await lossCount();
    const hold = webhook.hold({ namespace: op.namespace, name, user: OPERATOR_USER });
    await createWidget(op, name);
    await hold.arrived;
    await cp.killApiserver("SIGKILL");
    hold.release();
    await cp.startApiserver();
    await oneLoss("apiserver SIGKILLed, write in flight", op, name, { cause: "connection_closed_unanswered", noticed: "no" }, since, lostBefore);
    // client-go either resumes its watch where it was (nothing reconciled
    // again) or lists anew and reconciles every object, this one too, and
    // that write lands: seen both ways. Neither is a loss.
    await sleep(SETTLE_MS); // past the correlation window: an event of the reconnects or of a rewrite would have come by now, and must not
    // While the port is closed, client-go's reconnects are refused: failed
    // connects are reported as such (the request they were for, a list or a
    // watch, from the operator's span when it has one), never as a status write.
    const afterKill = agent.events.slice(since).filter((e) => e.request?.path !== statusPathOf(op.namespace, name));
    const notRefusedReads = afterKill.filter((e) => e.cause !== "connect_failed" || (e.request !== null && e.request.method !== "GET"));
    assert.deepEqual(notRefusedReads, [], `besides the write's loss, only refused connects of reads: ${describeEvents(afterKill)}`);
    assert.equal(eventsFor(statusPathOf(op.namespace, name)).length, 1, "one event for the write: a rewrite after a re-list is no loss");
  });
  it("the apiserver shut down gracefully (SIGTERM) with a status write in flight: GOAWAY, the write it had accepted answered before it exits, then restarted: no loss", async () => {
    // Why the real apiserver: its graceful termination (GOAWAY on every HTTP/2 connection, then draining the requests it accepted) is the real one's; the stand-in has none.
    // What the real kube-apiserver (v1.37.2, default shutdown flags) did, measured here: on SIGTERM it closes its
    // listener and sends one GOAWAY, NO_ERROR, whose last stream id is the highest stream it had received (the held
    // write's, or a later one's); the held write, released, is answered 200; the watches on the connection go on for
    // 60 s (its HTTP server's shutdown timeout, the request timeout), then end, Go closes the connection and the
    // apiserver exits. Streams above the last stream id (a write sent while the GOAWAY was on its way) Go sends again
    // on a new connection: retries (retried{code="goaway"}), never losses. They need a write in the microseconds of
    // that window and were not seen here; the apiserver's --goaway-chance (a GOAWAY after a random request, which
    // production sets to rebalance HTTP/2 clients across apiservers) sends the same frame, by chance.
    const op = operators.careful;
    const name = "drained";
    const statusPath = statusPathOf(op.namespace, name);
    const since = agent.events.length;
    const lostBefore = await lossCount();
    const retriedBefore = await agent.metric("lostwrite_status_write_retried_total", { code: "goaway" });
    const hold = webhook.hold({ namespace: op.namespace, name, user: OPERATOR_USER });
    await createWidget(op, name);
    await hold.arrived;
    const goAwaysBefore = goLines("go_goaway", op.pid).length;
    const exited = cp.killApiserver("SIGTERM");
    let goAway: PrintfRecordOf<"go_goaway"> | undefined;
    try {
      await waitFor("the operator to read the apiserver's GOAWAY (the Go probe's line)", () => goLines("go_goaway", op.pid).length > goAwaysBefore, 30_000);
      goAway = goLines("go_goaway", op.pid).at(-1);
    } finally {
      hold.release();
      // Started again even when the wait failed: the cases after this one need an apiserver.
      await exited;
      await cp.startApiserver();
    }
    await waitFor(`${name}'s status to land`, () => landed(op, name), 30_000);
    await sleep(SETTLE_MS); // past the correlation window: an event of the write or of the reconnects would have come by now, and must not
    const retried = (await agent.metric("lostwrite_status_write_retried_total", { code: "goaway" })) - retriedBefore;
    const written = streamIdOf(op.pid, statusPath);
    rows.push({
      fault: "apiserver SIGTERM (GOAWAY), write in flight",
      expected: "no event (the accepted write answered)",
      detected: `${describeEvents(eventsFor(statusPath))}; GOAWAY ${H2_ERROR_NAMES[goAway!.code] ?? goAway!.code} last stream ${goAway!.lastStreamId}, write on stream ${written?.streamId}; retried{code=goaway} +${retried}`,
    });
    assert.equal(goAway!.code, 0, "a graceful GOAWAY: NO_ERROR");
    assert.ok(written !== undefined && written.conn === goAway!.conn, "the write went on the connection the GOAWAY came on");
    assert.ok(goAway!.lastStreamId >= written.streamId, `the GOAWAY's last stream id (${goAway!.lastStreamId}) covers the write's stream (${written.streamId}): the apiserver had accepted it`);
    await assertGoProbeFollowed();
    assert.deepEqual(eventsFor(statusPath), [], "the accepted write was answered: no event");
    assert.equal(await lossCount(), lostBefore, "no status loss counted");
    // While the port is closed, client-go's reconnects are refused: failed connects of reads, as after the SIGKILL.
    const afterStop = agent.events.slice(since);
    assert.deepEqual(afterStop.filter((e) => e.cause !== "connect_failed" || (e.request !== null && e.request.method !== "GET")), [],
      `only refused connects of reads: ${describeEvents(afterStop)}`);
  });

  it("APF: the operator's status write rejected 429 by its FlowSchema's priority level, retried by client-go after Retry-After and answered: a retry, no loss", async () => {
    // Why the real apiserver: API Priority and Fairness (a FlowSchema, a PriorityLevelConfiguration that rejects, its seats and Retry-After) exists only in the real one.
    const op = operators.careful;
    const name = "throttled";
    const hogs = "cp-hogs";
    await cp.ensureNamespace(hogs);
    const hog = await cp.kubeconfigFor("hog", { user: "lostwrite-hog" });
    const level = await cp.create("/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations", {
      apiVersion: "flowcontrol.apiserver.k8s.io/v1", kind: "PriorityLevelConfiguration", metadata: { name: "lostwrite-throttled" },
      // The fewest seats a level gets (1 share of the server's 600), none lent or borrowed, and no queue: full means 429.
      spec: { type: "Limited", limited: { nominalConcurrencyShares: 1, lendablePercent: 0, borrowingLimitPercent: 0, limitResponse: { type: "Reject" } } },
    }) as { metadata: { uid: string } };
    await cp.create("/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", {
      apiVersion: "flowcontrol.apiserver.k8s.io/v1", kind: "FlowSchema", metadata: { name: "lostwrite-throttled" },
      spec: {
        priorityLevelConfiguration: { name: "lostwrite-throttled" }, matchingPrecedence: 500, distinguisherMethod: { type: "ByUser" },
        rules: [{
          subjects: [OPERATOR_USER, "lostwrite-hog"].map((user) => ({ kind: "User", user: { name: user } })),
          resourceRules: [{ verbs: ["update", "patch"], apiGroups: [WIDGET_GROUP], resources: ["widgets/status"], namespaces: [op.namespace, hogs] }],
        }],
      },
    });
    const hogWrite = (widget: string): Promise<{ status: number; headers: Record<string, string | string[] | undefined> }> =>
      cp.request("PATCH", statusPathOf(hogs, widget), { as: hog.client, contentType: "application/merge-patch+json", body: { status: { phase: "Pending" } } });
    // The level is in force once the apiserver classifies a hog's write into it (it says so in a response header).
    await cp.create(widgetsPath(hogs), { apiVersion: `${WIDGET_GROUP}/${WIDGET_VERSION}`, kind: "Widget", metadata: { name: "probe" }, spec: { size: 0 } });
    await waitFor("the apiserver to classify the hog's writes into the new priority level", async () =>
      (await hogWrite("probe")).headers["x-kubernetes-pf-prioritylevel-uid"] === level.metadata.uid, 30_000);
    const seats = async (): Promise<number> => {
      const text = (await cp.request("GET", "/metrics")).body as string;
      const line = text.split("\n").find((l) => l.startsWith("apiserver_flowcontrol_nominal_limit_seats{") && l.includes('priority_level="lostwrite-throttled"'));
      return Number(line?.split(" ").at(-1) ?? 0);
    };
    const rejected = async (): Promise<number> => {
      const text = (await cp.request("GET", "/metrics")).body as string;
      return text.split("\n").filter((l) => l.startsWith("apiserver_flowcontrol_rejected_requests_total{") && l.includes('priority_level="lostwrite-throttled"'))
        .reduce((sum, l) => sum + Number(l.split(" ").at(-1)), 0);
    };
    const seatCount = await seats();
    assert.ok(seatCount >= 1 && seatCount <= 10, `the level has a few seats: ${seatCount}`);

    // The hog takes every seat: its status writes, held in flight by the webhook.
    const holds = [];
    const pendingWrites = [];
    for (let i = 0; i < seatCount; i++) {
      await cp.create(widgetsPath(hogs), { apiVersion: `${WIDGET_GROUP}/${WIDGET_VERSION}`, kind: "Widget", metadata: { name: `hog-${i}` }, spec: { size: 0 } });
      const hold = webhook.hold({ namespace: hogs, name: `hog-${i}`, user: "lostwrite-hog" });
      pendingWrites.push(hogWrite(`hog-${i}`));
      await hold.arrived;
      holds.push(hold);
    }
    const since = agent.events.length;
    const lostBefore = await lossCount();
    const retriedBefore = await agent.metric("lostwrite_status_write_retried_total", { code: "429" });
    const rejectedBefore = await rejected();
    try {
      await createWidget(op, name);
      await waitFor("the apiserver to reject the operator's status write (429)", async () => (await rejected()) > rejectedBefore, 30_000);
    } finally {
      for (const hold of holds) hold.release();
      await Promise.all(pendingWrites);
    }
    // client-go waits the answer's Retry-After (1 s) and sends the write again: answered this time.
    await waitFor(`${name}'s status to land`, () => landed(op, name), 30_000);
    await waitFor("the 429 to be counted as a retry", async () => (await agent.metric("lostwrite_status_write_retried_total", { code: "429" })) > retriedBefore, 10_000);
    await sleep(SETTLE_MS); // past the correlation window: a loss event of the refused write would have come by now, and must not
    const retried = (await agent.metric("lostwrite_status_write_retried_total", { code: "429" })) - retriedBefore;
    rows.push({ fault: "APF 429, retried after Retry-After", expected: "no event, retried{code=429} +1", detected: `${describeEvents(agent.events.slice(since))}, retried{code=429} +${retried}` });
    assert.equal((await rejected()) - rejectedBefore, 1, "the apiserver rejected one request of the level");
    assert.equal(retried, 1, "one retry counted");
    assert.deepEqual(agent.events.slice(since), [], "no event");
    assert.equal(await lossCount(), lostBefore, "no status loss counted");
    // The careful operator's later status writes are its own again.
    assert.equal((await cp.request("DELETE", "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/lostwrite-throttled")).status, 200);
  });

  it("no fault, normal reconcile load: 40 widgets created, then each one's spec changed; every status lands and nothing is reported", async () => {
    // Why the real apiserver: its answers to a burst (watch events, resourceVersions, APF's queues) are the real ones, which the agent must not mistake for losses.
    const since = agent.events.length;
    const lostBefore = await lossCount();
    const names = Array.from({ length: 20 }, (_, i) => `load-${i}`);
    const all = Object.values(operators).flatMap((op) => names.map((name) => ({ op, name })));
    await Promise.all(all.map(({ op, name }) => createWidget(op, name)));
    await waitFor("every widget's status to land", async () => (await Promise.all(all.map(({ op, name }) => landed(op, name)))).every(Boolean), 60_000);
    await Promise.all(all.map(async ({ op, name }) => {
      const res = await cp.request("PATCH", `${widgetsPath(op.namespace)}/${name}`, { contentType: "application/merge-patch+json", body: { spec: { size: 2 } } });
      assert.equal(res.status, 200, JSON.stringify(res.body));
    }));
    const atGeneration2 = async ({ op, name }: { op: CrOperator; name: string }): Promise<boolean> => (await statusOf(op, name))?.observedGeneration === 2;
    await waitFor("every widget's second status to land", async () => (await Promise.all(all.map(atGeneration2))).every(Boolean), 60_000);
    await sleep(SETTLE_MS); // past the correlation window: any event of these writes would have come by now
    rows.push({ fault: `no fault: ${all.length * 2} status writes under load`, expected: "no event", detected: describeEvents(agent.events.slice(since)) });
    await assertGoProbeFollowed();
    assert.deepEqual(agent.events.slice(since), [], "no event");
    assert.equal(await lossCount(), lostBefore, "no status loss counted");
  });

  it("GOAWAY by chance: the apiserver restarted with --goaway-chance (production's HTTP/2 rebalancing) under bursts of status writes; what Go sends again is no loss", async () => {
    // Why the real apiserver: --goaway-chance is its own filter (a random HTTP/2 request's answer says "Connection: close", which Go's HTTP/2 server sends as a GOAWAY); the stand-in has none.
    const since = agent.events.length;
    const lostBefore = await lossCount();
    const retriedBefore = await agent.metric("lostwrite_status_write_retried_total", { code: "goaway" });
    const ops = Object.values(operators);
    const goAwaysBefore = ops.map((op) => goLines("go_goaway", op.pid).length);
    const goAways = (): number => ops.reduce((sum, op, i) => sum + goLines("go_goaway", op.pid).length - goAwaysBefore[i]!, 0);
    // Restarted while nothing is in flight, so SIGKILL (a graceful stop waits 60 s for the watches, above); 0.02 is the most the flag takes.
    await cp.killApiserver("SIGKILL");
    await cp.startApiserver(["--goaway-chance=0.02"]);
    // Bursts of 40 status writes (20 new widgets per operator) until the operators have read three GOAWAYs: at 0.02 per
    // request about one in 50 of their requests draws one. Each burst's statuses land before the next.
    let writes = 0;
    for (let burst = 0; goAways() < 3; burst++) {
      assert.ok(burst < 25, `the operators read ${goAways()} GOAWAYs in ${writes} status writes`);
      const batch = ops.flatMap((op) => Array.from({ length: 20 }, (_, i) => ({ op, name: `goaway-${burst}-${i}` })));
      await Promise.all(batch.map(({ op, name }) => createWidget(op, name)));
      await waitFor(`burst ${burst}'s statuses to land`, async () => (await Promise.all(batch.map(({ op, name }) => landed(op, name)))).every(Boolean), 60_000);
      writes += batch.length;
    }
    await sleep(SETTLE_MS); // past the correlation window: an event of a write cut off by a GOAWAY would have come by now, and must not
    const retried = (await agent.metric("lostwrite_status_write_retried_total", { code: "goaway" })) - retriedBefore;
    const codes = [...new Set(ops.flatMap((op, i) => goLines("go_goaway", op.pid).slice(goAwaysBefore[i]).map((g) => H2_ERROR_NAMES[g.code] ?? g.code)))];
    const statusEvents = agent.events.slice(since).filter((e) => e.request?.path?.endsWith("/status"));
    rows.push({
      fault: `--goaway-chance=0.02, ${writes} status writes`,
      expected: "no event",
      detected: `${describeEvents(statusEvents)}; ${goAways()} GOAWAYs (${codes.join(", ")}), retried{code=goaway} +${retried}`,
    });
    await assertGoProbeFollowed();
    assert.deepEqual(codes, ["NO_ERROR"], "the rebalancing GOAWAY is a graceful one");
    assert.deepEqual(statusEvents, [], "no status write was lost");
    assert.equal(await lossCount(), lostBefore, "no status loss counted");
    // While the port was closed (the restart), client-go's reconnects were refused: failed connects of reads, as after the SIGKILL above.
    const afterRestart = agent.events.slice(since);
    assert.deepEqual(afterRestart.filter((e) => e.cause !== "connect_failed" || (e.request !== null && e.request.method !== "GET")), [],
      `only refused connects of reads: ${describeEvents(afterRestart)}`);
  });
});
