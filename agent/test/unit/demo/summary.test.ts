// The demo's verdict: injected faults paired with the agent's loss events.
// The demo exits 0 only when this says they agree, so it must catch a missed
// fault, a duplicate, an invented loss, a wrong `noticed` and a loss pinned
// on the wrong operator.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { FaultRecord } from "../../../../testbed/apiserver/faults.ts";
import { parseRule, type Rule } from "../../../../testbed/apiserver/scenario.ts";
import { expectedDetections, matchDetections, type DemoOperator } from "../../../src/demo/summary.ts";
import type { LossCause, LossEvent, Noticed } from "../../../src/model.ts";

const OPERATORS: DemoOperator[] = [
  { mode: "swallow", namespace: "silent", pid: 100 },
  { mode: "correct", namespace: "careful", pid: 200 },
  { mode: "writer", namespace: "writer", pid: 300 },
];
const T0 = Date.parse("2026-12-02T15:04:05.000Z");
const statusPath = (ns: string): string => `/apis/demo.lostwrite.dev/v1/namespaces/${ns}/widgets/widget-1/status`;

function record(seq: number, rule: string, ns: string, atMs: number, expect: FaultRecord["expect"], action: FaultRecord["action"] = "reset"): FaultRecord {
  return {
    seq, time: new Date(T0 + atMs).toISOString(), monotonicNs: String(seq), rule, action, detail: action,
    method: "PATCH", path: statusPath(ns), protocol: "h2", streamId: 1,
    connection: { id: seq, client: "127.0.0.1:40000", server: "127.0.0.1:6443" }, bytesRead: 0, expect,
  };
}

function event(cause: LossCause, atMs: number, opts: { pid?: number | null; ns?: string; noticed?: Noticed } = {}): LossEvent {
  const ns = opts.ns ?? "silent";
  return {
    kind: "status_write_lost", time: new Date(T0 + atMs).toISOString().replace("Z", "123Z"), node: "demo",
    namespace: null, pod: null, container: null, process: "MainThread", pid: opts.pid === undefined ? 100 : opts.pid, tid: 1,
    cause, syscall: null, errno: null, ret: null, bytes: null, apiserver: "127.0.0.1:6443", noticed: opts.noticed ?? "no",
    correlation: "span", trace_id: "t", span_id: "s",
    reconcile: { controller: "widget", namespace: ns, name: "widget-1", kind: "Widget" },
    request: { method: "PATCH", path: statusPath(ns), status_code: null },
    unanswered_bytes: null, unanswered_for_ms: null, retransmits: null,
  };
}

const noRules = new Map<string, Rule>();

describe("demo summary: expected vs detected", () => {
  it("pairs each fault with its detection by cause, operator and time, noticed defaulting to the operator's mode", () => {
    const records = [
      record(1, "rst", "silent", 0, { cause: "connection_reset" }),
      record(2, "conflict", "careful", 2000, { cause: "http_rejected" }, "status"),
      record(3, "slow", "careful", 4000, null, "delay"),
    ];
    const expected = expectedDetections(records, noRules, OPERATORS);
    assert.deepEqual(expected.map((e) => [e.rule, e.cause, e.operator, e.noticed]), [
      ["rst", "connection_reset", "silent", "no"],
      ["conflict", "http_rejected", "careful", "yes"],
    ]);
    // An http_rejected event carries no pid: the reconcile's namespace names the operator.
    const events = [event("http_rejected", 2010, { pid: null, ns: "careful", noticed: "yes" }), event("connection_reset", 5)];
    const result = matchDetections(expected, events, OPERATORS);
    assert.equal(result.agree, true);
    assert.deepEqual(result.matched.map((m) => m.expected.rule), ["rst", "conflict"]);
  });

  it("reports a fault without a detection as missed", () => {
    const expected = expectedDetections([record(1, "rst", "silent", 0, { cause: "connection_reset" })], noRules, OPERATORS);
    const result = matchDetections(expected, [], OPERATORS);
    assert.equal(result.agree, false);
    assert.deepEqual(result.missed.map((e) => e.rule), ["rst"]);
  });

  it("reports a second detection of one fault, and a loss no fault explains, as invented", () => {
    const expected = expectedDetections([record(1, "rst", "silent", 0, { cause: "connection_reset" })], noRules, OPERATORS);
    const duplicate = matchDetections(expected, [event("connection_reset", 0), event("connection_reset", 40)], OPERATORS);
    assert.equal(duplicate.agree, false);
    assert.equal(duplicate.invented.length, 1);
    const stray = matchDetections(expected, [event("connection_reset", 0), event("connect_failed", 30_000, { pid: 200, ns: "careful" })], OPERATORS);
    assert.equal(stray.agree, false);
    assert.deepEqual(stray.invented.map((e) => e.cause), ["connect_failed"]);
  });

  it("does not accept a detection of the right cause on the other operator, or outside the time window", () => {
    const expected = expectedDetections([record(1, "rst", "silent", 0, { cause: "connection_reset" })], noRules, OPERATORS);
    const other = matchDetections(expected, [event("connection_reset", 0, { pid: 200, ns: "careful" })], OPERATORS);
    assert.equal(other.missed.length, 1);
    assert.equal(other.invented.length, 1);
    const late = matchDetections(expected, [event("connection_reset", 60_000)], OPERATORS);
    assert.equal(late.agree, false);
    assert.equal(late.missed.length, 1);
  });

  it("disagrees when a silent loss is reported as noticed", () => {
    const expected = expectedDetections([record(1, "rst", "silent", 0, { cause: "connection_reset", noticed: "no" })], noRules, OPERATORS);
    const result = matchDetections(expected, [event("connection_reset", 0, { noticed: "yes" })], OPERATORS);
    assert.equal(result.agree, false);
    assert.equal(result.matched[0]?.noticedAgrees, false);
  });

  it("expects an outage that resets connections to lose the triggering request too", () => {
    const rules = new Map<string, Rule>([["outage", parseRule({ id: "outage", action: "refuse", for: "700ms", existing: "reset" })]]);
    const records = [record(1, "outage", "careful", 0, { cause: "connect_failed" }, "refuse")];
    const expected = expectedDetections(records, rules, OPERATORS);
    assert.deepEqual(expected.map((e) => e.cause), ["connection_reset", "connect_failed"]);
    const events = [event("connection_reset", 0, { pid: 200, ns: "careful", noticed: "yes" }), event("connect_failed", 330, { pid: 200, ns: "careful", noticed: "yes" })];
    assert.equal(matchDetections(expected, events, OPERATORS).agree, true);
    // With existing connections kept, the triggering request is served: only the refused connect.
    const kept = new Map<string, Rule>([["outage", parseRule({ id: "outage", action: "refuse", for: "700ms" })]]);
    assert.deepEqual(expectedDetections(records, kept, OPERATORS).map((e) => e.cause), ["connect_failed"]);
  });

  it("expects the status writer's reset to lose the request and the write into the dead connection, both noticed unknown", () => {
    const rules = new Map<string, Rule>([
      ["rst-writer", parseRule({ id: "rst-writer", action: "reset", path: "*/namespaces/writer/*" })],
      ["zero-writer", parseRule({ id: "zero-writer", action: "delay", for: "100ms", path: "*/namespaces/writer/*" })],
    ]);
    const records = [
      record(1, "rst-writer", "writer", 0, { cause: "write_failed" }),
      record(2, "zero-writer", "writer", 2000, { cause: "zero_byte_write" }, "delay"),
    ];
    const expected = expectedDetections(records, rules, OPERATORS);
    assert.deepEqual(expected.map((e) => [e.rule, e.cause, e.operator, e.noticed]), [
      ["rst-writer", "connection_reset", "writer", "unknown"],
      ["rst-writer", "write_failed", "writer", "unknown"],
      ["zero-writer", "zero_byte_write", "writer", "unknown"],
    ]);
    // The writer sends no spans: its events name it by pid only, with no reconcile or request.
    const bare = (cause: LossCause, atMs: number, noticed: Noticed = "unknown"): LossEvent => ({
      ...event(cause, atMs, { pid: 300, noticed }), correlation: "none", trace_id: null, span_id: null, reconcile: null, request: null,
    });
    const events = [bare("connection_reset", 0), bare("write_failed", 450), bare("zero_byte_write", 2150)];
    assert.equal(matchDetections(expected, events, OPERATORS).agree, true);
    // A write into a dead connection that is not reported is missed, and a wrong noticed disagrees.
    assert.deepEqual(matchDetections(expected, events.slice(0, 1).concat(events.slice(2)), OPERATORS).missed.map((e) => e.cause), ["write_failed"]);
    assert.equal(matchDetections(expected, [bare("connection_reset", 0), bare("write_failed", 450, "no"), bare("zero_byte_write", 2150)], OPERATORS).agree, false);
    // The same causes on an operator's pid do not count for the writer.
    assert.equal(matchDetections(expected, events.map((e) => ({ ...e, pid: 100 })), OPERATORS).matched.length, 0);
  });
});
