// Events become metric increments with bounded labels; a gone pod's series go.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { LossEvent } from "../../../src/model.ts";
import { BoundedLabel, recordLoss } from "../../../src/sinks/lossMetrics.ts";
import { recordSocketEvent, removePodSeries } from "../../../src/telemetry/workloadSeries.ts";
import { AgentMetrics } from "../../../src/telemetry/metrics.ts";

const event = (over: Partial<LossEvent>): LossEvent => ({
  kind: "status_write_lost", time: "2026-12-02T15:04:05.123456Z", node: "n1", namespace: "ops", pod: "op-1", container: "manager",
  process: "manager", pid: 1, tid: 1, cause: "write_failed", syscall: "write", errno: "EPIPE", ret: -32, bytes: null,
  apiserver: "10.96.0.1:443", noticed: "no", correlation: "span", trace_id: "t", span_id: "s", reconcile: null,
  request: { method: "PATCH", path: "/apis/demo.lostwrite.dev/v1/namespaces/default/widgets/w1/status", status_code: null },
  unanswered_bytes: null, unanswered_for_ms: null, retransmits: null, ...over,
});

describe("loss metrics", () => {
  it("labels the request kind from the span and keeps errno in its closed set", async () => {
    const metrics = new AgentMetrics();
    recordLoss(metrics, event({}), "widget");
    recordLoss(metrics, event({ request: null, errno: "ENOTREAL" }), "widget");
    recordLoss(metrics, event({ request: { method: "GET", path: "/api/v1/pods", status_code: 200 }, errno: null }), "widget");
    const { values } = await metrics.statusWriteLost.get();
    const seen = values.map((v) => `${v.labels.request}/${v.labels.errno}`).sort();
    assert.deepEqual(seen, ["other/none", "status/EPIPE", "unknown/other"]);
  });

  it("keeps a joined loss's trace as its series' exemplar, and no exemplar for an id that is not a trace id", async () => {
    const metrics = new AgentMetrics();
    recordLoss(metrics, event({ trace_id: "4bf92f3577b34da6a3ce929d0e0e4736", span_id: "00f067aa0ba902b7" }), "widget");
    recordLoss(metrics, event({ pod: "op-2" }), "widget"); // trace_id "t"
    const text = await metrics.openMetrics();
    assert.match(text, /pod="op-1"[^}]*\} 1 # \{trace_id="4bf92f3577b34da6a3ce929d0e0e4736",span_id="00f067aa0ba902b7"\} 1 \d+\.\d{3}$/m);
    assert.match(text, /pod="op-2"[^}]*\} 1$/m);
    assert.ok(!(await metrics.text()).includes("trace_id"), "the classic format has no exemplars");
  });

  it("bounds controller names taken from spans", () => {
    const label = new BoundedLabel(2);
    assert.deepEqual(["a", "b", "c", "a"].map((v) => label.value(v)), ["a", "b", "other", "a"]);
  });

  it("removes every series of a pod that went away, and only those", async () => {
    const metrics = new AgentMetrics();
    const workload = (pod: string) => ({ namespace: "ops", pod, container: "manager", process: "manager" });
    recordLoss(metrics, event({ pod: "op-1" }), "widget");
    recordLoss(metrics, event({ pod: "op-2" }), "widget");
    recordSocketEvent(metrics, { syscall: "write", errno: "EPIPE" }, workload("op-1"));
    metrics.writes.inc(workload("op-1"));
    metrics.writes.inc(workload("op-2"));
    await removePodSeries(metrics, "ops", "op-1");
    const text = await metrics.text();
    assert.ok(!text.includes('pod="op-1"'), "op-1's series are gone");
    assert.ok(text.includes('lostwrite_status_write_lost_total{namespace="ops",pod="op-2"'));
    assert.ok(text.includes('lostwrite_apiserver_writes_total{namespace="ops",pod="op-2"'));
  });
});
