import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { Correlator, formatWallNs, type LossMeta } from "../../../src/correlate/correlator.ts";
import { MonotonicClock } from "../../../src/correlate/monotonicClock.ts";
import type { LossEvent, ProcessIdentity, SocketEvent } from "../../../src/model.ts";
import { AgentMetrics } from "../../../src/telemetry/metrics.ts";
import { type IndexedSpan, toIndexedSpans } from "../../../src/sources/spans/indexedSpans.ts";
import { decodeProtobufTraceRequest } from "../../../src/sources/spans/otlpProtobuf.ts";
import { SpanIndex } from "../../../src/sources/spans/spanIndex.ts";
import { protobufBody, type SpanDef } from "../sources/spans/otlpSpans.ts";

const T0 = Date.UTC(2026, 11, 2, 15, 4, 5); // wall ms of the scenario
const MONO_AT_T0 = 5_000_000_000_000n; // kernel ns at T0
const clock = MonotonicClock.fixed(BigInt(T0) * 1_000_000n - MONO_AT_T0);
const kernelNs = (wallMs: number): bigint => MONO_AT_T0 + BigInt(Math.round((wallMs - T0) * 1e6));

const HOST_PID = 4242;
const NS_PID = 1; // what the operator calls itself inside its pod
const RESOURCE = { "process.pid": NS_PID, "k8s.pod.name": "widget-operator-7d9", "k8s.namespace.name": "ops" };
const identity: ProcessIdentity = {
  pid: HOST_PID,
  tid: 4250,
  process: "manager",
  namespace: "ops",
  pod: "widget-operator-7d9",
  container: "manager",
  controller: "widget-operator",
};

function socketEvent(atMs: number, over: Partial<SocketEvent> = {}): SocketEvent {
  return {
    kernelTimeNs: kernelNs(atMs),
    pid: HOST_PID,
    tid: 4250,
    process: "manager",
    syscall: "write",
    ret: -32,
    errno: "EPIPE",
    bytes: 1834,
    apiserver: "10.96.0.1:443",
    cause: "write_failed",
    unansweredBytes: null,
    unansweredForMs: null,
    retransmits: null,
    ...over,
  };
}

let nextId = 1;
function id(len: number): string {
  return (nextId++).toString(16).padStart(len, "0");
}

/** A reconcile span of one Widget with one status PATCH inside it. */
function reconcileWithPatch(
  widget: string,
  opts: { startMs: number; patchStartMs: number; patchEndMs: number; endMs: number; patch?: Partial<SpanDef>; reconcileStatus?: SpanStatusCode },
): { reconcile: SpanDef; patch: SpanDef } {
  const traceId = id(32);
  const reconcile: SpanDef = {
    traceId,
    spanId: id(16),
    name: "reconcile",
    startMs: opts.startMs,
    endMs: opts.endMs,
    status: opts.reconcileStatus ?? SpanStatusCode.UNSET,
    attributes: { controller: "widget", controllerKind: "Widget", namespace: "default", name: widget },
    resource: RESOURCE,
  };
  const patch: SpanDef = {
    traceId,
    spanId: id(16),
    parentSpanId: reconcile.spanId,
    name: "PATCH",
    kind: SpanKind.CLIENT,
    startMs: opts.patchStartMs,
    endMs: opts.patchEndMs,
    status: SpanStatusCode.ERROR,
    attributes: {
      "http.request.method": "PATCH",
      "url.full": `https://10.96.0.1:443/apis/example.com/v1/namespaces/default/widgets/${widget}/status`,
      "server.address": "10.96.0.1",
      "server.port": 443,
      "error.type": "write: broken pipe",
    },
    resource: RESOURCE,
    ...opts.patch,
  };
  return { reconcile, patch };
}

function spans(defs: SpanDef[]): IndexedSpan[] {
  return toIndexedSpans(decodeProtobufTraceRequest(protobufBody(defs)), "127.0.0.1");
}

/** A span of the same process that ended well after everything: tells the correlator the spans are in. */
function laterSpan(atMs: number): SpanDef {
  return { traceId: id(32), spanId: id(16), name: "housekeeping", startMs: atMs, endMs: atMs + 1, resource: RESOURCE };
}

function setup(
  over: { windowMs?: number; slackMs?: number; pendingCapacity?: number; isApiserver?: (host: string, port: number) => boolean; targetSinceMs?: (pid: number) => number | null } = {},
  sender = true,
) {
  let nowMs = T0 + 1000;
  const metrics = new AgentMetrics();
  const index = new SpanIndex({ capacity: 10_000, maxAgeMs: 60_000, metrics, now: () => nowMs });
  const out: { event: LossEvent; meta: LossMeta }[] = [];
  const correlator = new Correlator({
    index,
    metrics,
    clock,
    node: "n1",
    nsPidsOf: (pid) => (pid === HOST_PID ? [HOST_PID, NS_PID] : null),
    onLoss: (event, meta) => out.push({ event, meta }),
    slackMs: 2,
    now: () => nowMs,
    ...over,
  });
  // The operator has been sending spans (a reconcile a minute ago): its losses wait for theirs.
  if (sender) correlator.addSpans(spans([laterSpan(T0 - 60_000)]));
  return {
    correlator,
    metrics,
    out,
    advance: (ms: number) => {
      nowMs += ms;
      correlator.tick();
    },
  };
}

void describe("correlator", () => {
  void test("a kernel failure inside a status PATCH: matched to the PATCH and its reconcile; silent when the reconcile ended OK", () => {
    const { correlator, out } = setup();
    const { reconcile, patch } = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
    correlator.addSocketEvent(socketEvent(T0 + 20), identity);
    assert.equal(out.length, 0, "waits for spans");
    correlator.addSpans(spans([patch, reconcile, laterSpan(T0 + 200)]));
    assert.equal(out.length, 1);
    const { event, meta } = out[0]!;
    assert.deepEqual(event, {
      kind: "status_write_lost",
      time: formatWallNs(BigInt(T0 + 20) * 1_000_000n),
      node: "n1",
      namespace: "ops",
      pod: "widget-operator-7d9",
      container: "manager",
      process: "manager",
      pid: HOST_PID,
      tid: 4250,
      cause: "write_failed",
      syscall: "write",
      errno: "EPIPE",
      ret: -32,
      bytes: 1834,
      apiserver: "10.96.0.1:443",
      noticed: "no",
      correlation: "span",
      trace_id: patch.traceId,
      span_id: patch.spanId,
      reconcile: { controller: "widget", namespace: "default", name: "w1", kind: "Widget" },
      request: { method: "PATCH", path: "/apis/example.com/v1/namespaces/default/widgets/w1/status", status_code: null },
      unanswered_bytes: null,
      unanswered_for_ms: null,
      retransmits: null,
    });
    assert.equal(event.time, "2026-12-02T15:04:05.020000Z");
    assert.deepEqual(meta, {
      kernelTimeNs: kernelNs(T0 + 20),
      wallTimeNs: BigInt(T0 + 20) * 1_000_000n,
      matchedSpan: { traceId: patch.traceId, spanId: patch.spanId },
    });
  });

  void test("noticed: yes when the reconcile span recorded the error", () => {
    const { correlator, out } = setup();
    const { reconcile, patch } = reconcileWithPatch("w1", {
      startMs: T0,
      patchStartMs: T0 + 10,
      patchEndMs: T0 + 30,
      endMs: T0 + 100,
      reconcileStatus: SpanStatusCode.ERROR,
    });
    correlator.addSocketEvent(socketEvent(T0 + 20), identity);
    correlator.addSpans(spans([patch, reconcile, laterSpan(T0 + 200)]));
    assert.equal(out[0]?.event.noticed, "yes");
  });

  void test("spans of the host pid are not the operator's: process.pid is matched through NSpid", () => {
    const { correlator, out, advance } = setup();
    const { reconcile, patch } = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
    const hostPidResource = { ...RESOURCE, "process.pid": HOST_PID };
    correlator.addSocketEvent(socketEvent(T0 + 20), identity);
    correlator.addSpans(spans([{ ...patch, resource: hostPidResource }, { ...reconcile, resource: hostPidResource }]));
    advance(10_000);
    const kernel = out.filter((o) => o.event.cause === "write_failed");
    assert.equal(kernel.length, 1);
    assert.equal(kernel[0]?.event.correlation, "none");
  });

  void test("two concurrent reconciles, one write answered: the unanswered one is chosen", () => {
    const { correlator, out } = setup();
    const a = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
    const b = reconcileWithPatch("w2", {
      startMs: T0 + 1,
      patchStartMs: T0 + 11,
      patchEndMs: T0 + 25,
      endMs: T0 + 90,
      patch: { status: SpanStatusCode.UNSET, attributes: { "http.request.method": "PATCH", "url.path": "/apis/example.com/v1/namespaces/default/widgets/w2/status", "http.response.status_code": 200 } },
    });
    correlator.addSocketEvent(socketEvent(T0 + 20), identity);
    correlator.addSpans(spans([b.patch, a.patch, b.reconcile, a.reconcile, laterSpan(T0 + 200)]));
    assert.equal(out.length, 1);
    assert.equal(out[0]?.event.correlation, "span");
    assert.equal(out[0]?.event.reconcile?.name, "w1");
  });

  void test("two concurrent reconciles, both writes unanswered: ambiguous with both, never one alone", () => {
    const { correlator, out } = setup();
    const a = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
    const b = reconcileWithPatch("w2", { startMs: T0 + 1, patchStartMs: T0 + 12, patchEndMs: T0 + 31, endMs: T0 + 95 });
    correlator.addSocketEvent(socketEvent(T0 + 20, { tid: 9999 }), identity);
    correlator.addSpans(spans([a.patch, b.patch, b.reconcile, a.reconcile, laterSpan(T0 + 200)]));
    assert.equal(out.length, 1);
    const { event, meta } = out[0]!;
    assert.equal(event.correlation, "ambiguous");
    assert.equal(event.span_id, null);
    assert.equal(event.reconcile, null, "the reconciles differ: none is named");
    assert.equal(meta.matchedSpan, null);
    assert.deepEqual(
      event.candidates?.map((c) => c.reconcile?.name).sort(),
      ["w1", "w2"],
    );
    assert.deepEqual(event.candidates?.map((c) => c.span_id).sort(), [a.patch.spanId, b.patch.spanId].sort());
  });

  void test("the failing thread's span breaks a tie when the sender records thread.id", () => {
    const { correlator, out } = setup();
    const a = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
    const b = reconcileWithPatch("w2", { startMs: T0 + 1, patchStartMs: T0 + 12, patchEndMs: T0 + 31, endMs: T0 + 95 });
    b.patch.attributes = { ...b.patch.attributes, "thread.id": 4251 };
    correlator.addSocketEvent(socketEvent(T0 + 20, { tid: 4251 }), identity);
    correlator.addSpans(spans([a.patch, b.patch, b.reconcile, a.reconcile, laterSpan(T0 + 200)]));
    assert.equal(out[0]?.event.correlation, "span");
    assert.equal(out[0]?.event.reconcile?.name, "w2");
  });

  void test("a kernel failure and the client span of the same failure make one event; the kernel names the cause", () => {
    const { correlator, out, advance } = setup();
    const { reconcile, patch } = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
    correlator.addSocketEvent(socketEvent(T0 + 20, { cause: "connection_reset", syscall: "unknown", errno: "ECONNRESET", ret: null as unknown as number }), identity);
    correlator.addSpans(spans([patch]));
    correlator.addSpans(spans([reconcile, laterSpan(T0 + 200)]));
    advance(20_000);
    assert.equal(out.length, 1, JSON.stringify(out.map((o) => o.event.cause)));
    assert.equal(out[0]?.event.cause, "connection_reset");
    assert.equal(out[0]?.event.span_id, patch.spanId);
    assert.equal(out[0]?.event.request?.method, "PATCH");
  });

  void test("a status write answered 409, with no kernel event: one http_rejected event, after its reconcile span arrived", () => {
    const { correlator, out, advance } = setup();
    const { reconcile, patch } = reconcileWithPatch("w1", {
      startMs: T0,
      patchStartMs: T0 + 10,
      patchEndMs: T0 + 30,
      endMs: T0 + 100,
      reconcileStatus: SpanStatusCode.ERROR,
      patch: {
        attributes: {
          "http.method": "PUT",
          "http.url": "https://10.96.0.1/apis/example.com/v1/namespaces/default/widgets/w1/status",
          "http.status_code": 409,
          "server.address": "10.96.0.1",
          "server.port": 443,
        },
      },
    });
    correlator.addSpans(spans([patch]));
    assert.equal(out.length, 0, "waits for the reconcile span");
    correlator.addSpans(spans([reconcile]));
    assert.equal(out.length, 1);
    const { event, meta } = out[0]!;
    assert.equal(event.cause, "http_rejected");
    assert.equal(event.correlation, "span");
    assert.deepEqual(event.request, { method: "PUT", path: "/apis/example.com/v1/namespaces/default/widgets/w1/status", status_code: 409 });
    assert.equal(event.reconcile?.name, "w1");
    assert.equal(event.noticed, "yes");
    assert.equal(event.pid, null, "process.pid is not a host pid");
    assert.equal(event.pod, "widget-operator-7d9");
    assert.equal(event.apiserver, "10.96.0.1:443");
    assert.equal(event.errno, null);
    assert.equal(meta.kernelTimeNs, null);
    advance(20_000);
    correlator.addSpans(spans([patch]));
    advance(20_000);
    assert.equal(out.length, 1, "the same span again is not a second loss");
  });

  void test("a GET answered 500 or a status write answered 200 is not an http_rejected loss", () => {
    const { correlator, out, advance } = setup();
    const get = reconcileWithPatch("w1", {
      startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100,
      patch: { attributes: { "http.request.method": "GET", "url.path": "/apis/example.com/v1/namespaces/default/widgets/w1/status", "http.response.status_code": 500 } },
    });
    const ok = reconcileWithPatch("w2", {
      startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100,
      patch: { status: SpanStatusCode.UNSET, attributes: { "http.request.method": "PATCH", "url.path": "/apis/example.com/v1/namespaces/default/widgets/w2/status", "http.response.status_code": 200 } },
    });
    correlator.addSpans(spans([get.patch, get.reconcile, ok.patch, ok.reconcile]));
    advance(20_000);
    assert.equal(out.length, 0);
  });

  void test("without spans the event waits for the window, then says correlation none", () => {
    const { correlator, out, advance, metrics } = setup({ windowMs: 10_000 });
    correlator.addSocketEvent(socketEvent(T0 + 20), identity);
    advance(9_999);
    assert.equal(out.length, 0);
    assert.equal(correlator.pendingCount, 1);
    advance(1);
    assert.equal(out.length, 1);
    const { event } = out[0]!;
    assert.equal(event.correlation, "none");
    assert.equal(event.noticed, "unknown");
    assert.equal(event.request, null);
    assert.equal(event.reconcile, null);
    assert.equal(event.trace_id, null);
    assert.equal(correlator.pendingCount, 0);
    const latency = metrics.detectionLatency as unknown as { hashMap: Record<string, { count: number }> };
    assert.ok(Object.values(latency.hashMap).some((h) => h.count === 1));
  });

  void test("a full pending buffer emits its oldest early and counts it; no event is lost", async () => {
    const { correlator, out, metrics } = setup({ pendingCapacity: 2 });
    for (let i = 0; i < 3; i++) correlator.addSocketEvent(socketEvent(T0 + i), identity);
    assert.equal(out.length, 1);
    assert.equal(correlator.pendingCount, 2);
    const dropped = (await metrics.eventsDropped.get()).values.find((v) => v.labels.stage === "correlate");
    assert.equal(dropped?.value, 1);
    correlator.flush();
    assert.equal(out.length, 3);
  });

  void test("the same input replays to byte-identical events", () => {
    const run = (): string => {
      nextId = 1000;
      const { correlator, out, advance } = setup();
      const a = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
      const b = reconcileWithPatch("w2", { startMs: T0 + 1, patchStartMs: T0 + 12, patchEndMs: T0 + 31, endMs: T0 + 95 });
      correlator.addSocketEvent(socketEvent(T0 + 20), identity);
      correlator.addSocketEvent(socketEvent(T0 + 500), identity);
      correlator.addSpans(spans([a.patch, b.patch, b.reconcile, a.reconcile, laterSpan(T0 + 200)]));
      advance(15_000);
      return out.map((o) => JSON.stringify(o.event)).join("\n");
    };
    const first = run();
    assert.equal(first.split("\n").length, 2);
    assert.equal(run(), first);
  });

  void test("a process that sends no spans: its loss goes out at once, not after the window", () => {
    const { correlator, out } = setup({ targetSinceMs: () => T0 + 1000 - 120_000 }, false);
    correlator.addSocketEvent(socketEvent(T0 + 20), identity);
    assert.equal(out.length, 1, "emitted without waiting");
    assert.equal(out[0]!.event.correlation, "none");
    assert.equal(out[0]!.event.noticed, "unknown");
  });

  void test("a target of a few seconds with no span yet waits: its first spans may still be in its exporter's batch", () => {
    const { correlator, out } = setup({ targetSinceMs: () => T0 - 3000 }, false);
    const { reconcile, patch } = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
    correlator.addSocketEvent(socketEvent(T0 + 20), identity);
    assert.equal(out.length, 0);
    correlator.addSpans(spans([patch, reconcile, laterSpan(T0 + 200)]));
    assert.equal(out.length, 1);
    assert.equal(out[0]!.event.span_id, patch.spanId);
  });

  void test("noticed waits for the reconcile span: a PATCH span that recorded the error does not make a swallowed loss 'noticed'", () => {
    const { correlator, out, advance } = setup();
    const { reconcile, patch } = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
    correlator.addSocketEvent(socketEvent(T0 + 20), identity);
    correlator.addSpans(spans([patch, laterSpan(T0 + 200)]));
    assert.equal(out.length, 0, "the PATCH arrived, its reconcile not yet: no verdict on noticed");
    advance(1000);
    correlator.addSpans(spans([reconcile]));
    assert.equal(out.length, 1);
    assert.equal(out[0]!.event.span_id, patch.spanId);
    assert.equal(out[0]!.event.noticed, "no", "the reconcile ended OK: the operator swallowed the error");
  });

  void test("a reconcile span that never comes: noticed is unknown, not judged on the PATCH span", () => {
    const { correlator, out, advance } = setup({ windowMs: 5000 });
    const { patch } = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
    correlator.addSocketEvent(socketEvent(T0 + 20), identity);
    correlator.addSpans(spans([patch, laterSpan(T0 + 200)]));
    advance(6000);
    assert.equal(out.length, 1);
    assert.equal(out[0]!.event.correlation, "span");
    assert.equal(out[0]!.event.noticed, "unknown");
  });

  void test("spans that arrive after the window do not report the same loss again", () => {
    const { correlator, out, advance } = setup({ windowMs: 2000 });
    const { reconcile, patch } = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
    correlator.addSocketEvent(socketEvent(T0 + 20, { cause: "connection_reset", syscall: null, errno: null, ret: null }), identity);
    advance(3000);
    assert.equal(out.length, 1, "emitted alone at the window's end");
    correlator.addSpans(spans([patch, reconcile, laterSpan(T0 + 200)]));
    advance(3000);
    correlator.flush();
    assert.equal(out.length, 1, "the late PATCH span describes the loss already reported");
  });

  void test("a connection reset with two status writes in flight: two events, one per write; the EPIPE echo adds none", () => {
    const { correlator, out } = setup();
    const a = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
    const b = reconcileWithPatch("w2", { startMs: T0 + 1, patchStartMs: T0 + 12, patchEndMs: T0 + 31, endMs: T0 + 95 });
    correlator.addSocketEvent(socketEvent(T0 + 20, { cause: "connection_reset", syscall: null, errno: null, ret: null }), identity);
    correlator.addSocketEvent(socketEvent(T0 + 21), identity);
    correlator.addSpans(spans([a.patch, b.patch, a.reconcile, b.reconcile, laterSpan(T0 + 200)]));
    assert.equal(out.length, 2);
    assert.deepEqual(out.map((o) => o.event.span_id).sort(), [a.patch.spanId, b.patch.spanId].sort());
    assert.ok(out.every((o) => o.event.correlation === "span" && o.event.cause === "connection_reset"));
  });

  void test("a 429 the client retried and then got answered 200: a retry, counted, not a loss", async () => {
    const { correlator, out, metrics, advance } = setup();
    const { reconcile, patch } = reconcileWithPatch("w1", {
      startMs: T0,
      patchStartMs: T0 + 10,
      patchEndMs: T0 + 30,
      endMs: T0 + 1500,
      patch: { attributes: { "http.request.method": "PATCH", "url.path": "/apis/example.com/v1/namespaces/default/widgets/w1/status", "http.response.status_code": 429 } },
    });
    const retry: SpanDef = {
      ...patch,
      spanId: id(16),
      startMs: T0 + 1030,
      endMs: T0 + 1050,
      status: SpanStatusCode.UNSET,
      attributes: { "http.request.method": "PATCH", "url.path": "/apis/example.com/v1/namespaces/default/widgets/w1/status", "http.response.status_code": 200 },
    };
    correlator.addSpans(spans([patch, retry, reconcile]));
    advance(15_000);
    correlator.flush();
    assert.equal(out.length, 0);
    const retried = (await metrics.statusWriteRetries.get()).values;
    assert.deepEqual(retried.map((v) => [v.labels.code, v.value]), [["429", 1]]);
  });

  void test("a span naming the Service ClusterIP matches a kernel event on its backend address", () => {
    const endpoints = new Set(["10.96.0.1:443", "192.168.1.10:6443"]);
    const run = (isApiserver?: (host: string, port: number) => boolean) => {
      const { correlator, out } = setup(isApiserver ? { isApiserver } : {});
      const { reconcile, patch } = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
      correlator.addSocketEvent(socketEvent(T0 + 20, { apiserver: "192.168.1.10:6443" }), identity);
      correlator.addSpans(spans([patch, reconcile, laterSpan(T0 + 200)]));
      correlator.flush();
      return out.map((o) => `${o.event.cause} ${o.event.span_id === patch.spanId ? "patch" : "other"}`);
    };
    assert.deepEqual(run((host, port) => endpoints.has(`${host}:${port}`)), ["write_failed patch"]);
    assert.equal(run().length, 2, "without the endpoint set the PATCH is another server's: two events for one write");
  });
});

void describe("correlator, requests the kernel read (Go's HTTP/2 client)", () => {
  const PATH = "/apis/example.com/v1/namespaces/default/widgets/w1/status";
  const kernelRequest = (atMs: number, statusCode: number | null, over: Partial<SocketEvent> = {}): SocketEvent =>
    socketEvent(atMs, {
      syscall: null, ret: null, errno: null, bytes: null, cause: statusCode === null ? "connection_reset" : "http_rejected",
      request: { method: "PATCH", path: PATH, statusCode, streamId: 7 }, ...over,
    });

  void test("matched to the span of the same request, not to another write open at the time; reported with stream and object", () => {
    const { correlator, out } = setup();
    const w1 = reconcileWithPatch("w1", { startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 30, endMs: T0 + 100 });
    // Another status write in flight at the time, which went on fine: by time alone the two would be ambiguous.
    const w2 = reconcileWithPatch("w2", {
      startMs: T0, patchStartMs: T0 + 5, patchEndMs: T0 + 40, endMs: T0 + 100,
      patch: { status: SpanStatusCode.UNSET, attributes: { "http.request.method": "PATCH", "url.full": "https://10.96.0.1:443/apis/example.com/v1/namespaces/default/widgets/w2/status" } },
    });
    correlator.addSocketEvent(kernelRequest(T0 + 20, null), identity);
    correlator.addSpans(spans([w1.patch, w1.reconcile, w2.patch, w2.reconcile, laterSpan(T0 + 200)]));
    assert.equal(out.length, 1);
    const { event } = out[0]!;
    assert.deepEqual([event.correlation, event.span_id, event.reconcile?.name], ["span", w1.patch.spanId, "w1"]);
    assert.deepEqual(event.request, {
      method: "PATCH", path: PATH, status_code: null, stream_id: 7,
      object: { namespace: "default", resource: "widgets", name: "w1", subresource: "status" },
    });
  });

  void test("complete without spans: a process that sends none is reported at once, with its request", () => {
    const { correlator, out } = setup({}, false);
    correlator.addSocketEvent(kernelRequest(T0 + 20, null), identity);
    assert.equal(out.length, 1);
    assert.deepEqual([out[0]!.event.correlation, out[0]!.event.request?.path, out[0]!.event.request?.stream_id], ["none", PATH, 7]);
  });

  void test("a refusal answered 2xx on a later try is one retry, never a loss, even with the refused try's span", async () => {
    const { correlator, out, metrics, advance } = setup({ windowMs: 2000 });
    correlator.addSocketEvent(kernelRequest(T0 + 20, 429), identity);
    correlator.addKernelSuccess(kernelRequest(T0 + 1020, 200), identity);
    const tries = reconcileWithPatch("w1", {
      startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 25, endMs: T0 + 1100,
      patch: { attributes: { "http.request.method": "PATCH", "url.full": `https://10.96.0.1:443${PATH}`, "http.response.status_code": 429 } },
    });
    correlator.addSpans(spans([tries.patch, tries.reconcile, laterSpan(T0 + 1200)]));
    advance(5000);
    assert.deepEqual(out, []);
    const retried = (await metrics.registry.getSingleMetricAsString("lostwrite_status_write_retried_total")).split("\n").filter((l) => !l.startsWith("#"));
    assert.deepEqual(retried, ['lostwrite_status_write_retried_total{namespace="ops",pod="widget-operator-7d9",code="429"} 1']);
  });

  void test("a refusal whose retry's spans arrive before the kernel's 2xx is one retry too", async () => {
    const { correlator, out, metrics, advance } = setup({ windowMs: 2000 });
    const tries = reconcileWithPatch("w1", {
      startMs: T0, patchStartMs: T0 + 10, patchEndMs: T0 + 25, endMs: T0 + 1100,
      patch: { attributes: { "http.request.method": "PATCH", "url.full": `https://10.96.0.1:443${PATH}`, "http.response.status_code": 429 } },
    });
    const retry = { ...tries.patch, spanId: id(16), startMs: T0 + 1030, endMs: T0 + 1040, attributes: { ...tries.patch.attributes, "http.response.status_code": 200 } };
    correlator.addSocketEvent(kernelRequest(T0 + 20, 429), identity);
    correlator.addSpans(spans([tries.patch, retry, tries.reconcile, laterSpan(T0 + 1200)]));
    correlator.addKernelSuccess(kernelRequest(T0 + 1035, 200), identity);
    advance(5000);
    assert.deepEqual(out, []);
    const retried = (await metrics.registry.getSingleMetricAsString("lostwrite_status_write_retried_total")).split("\n").filter((l) => !l.startsWith("#"));
    assert.deepEqual(retried, ['lostwrite_status_write_retried_total{namespace="ops",pod="widget-operator-7d9",code="429"} 1']);
  });

  void test("a refusal's span that beats the kernel's reading of it still makes one event, the kernel's", () => {
    const { correlator, out, advance } = setup({ windowMs: 2000 });
    correlator.noteRequestLevel(HOST_PID, identity); // the Go probe attached
    // The clock stands at T0 + 1 s: these spans have just ended.
    const refused = reconcileWithPatch("w1", {
      startMs: T0 + 900, patchStartMs: T0 + 910, patchEndMs: T0 + 925, endMs: T0 + 930,
      patch: { attributes: { "http.request.method": "PATCH", "url.full": `https://10.96.0.1:443${PATH}`, "http.response.status_code": 409 } },
    });
    correlator.addSpans(spans([refused.patch, refused.reconcile, laterSpan(T0 + 990)]));
    advance(500);
    assert.equal(out.length, 0, "the span's loss waits for the kernel's verdict");
    correlator.addSocketEvent(kernelRequest(T0 + 920, 409), identity);
    advance(3000);
    assert.deepEqual(out.map(({ event }) => [event.pid, event.cause, event.span_id, event.request?.stream_id]), [[HOST_PID, "http_rejected", refused.patch.spanId, 7]]);
  });

  void test("settles as soon as the span of that very request and its reconcile are in, without waiting for later spans", () => {
    const { correlator, out } = setup({ windowMs: 10_000, slackMs: 100 });
    const refused = reconcileWithPatch("w1", {
      startMs: T0 + 900, patchStartMs: T0 + 910, patchEndMs: T0 + 925, endMs: T0 + 930,
      patch: { attributes: { "http.request.method": "PATCH", "url.full": `https://10.96.0.1:443${PATH}`, "http.response.status_code": 409 } },
    });
    correlator.addSocketEvent(kernelRequest(T0 + 920, 409), identity);
    correlator.addSpans(spans([refused.patch, refused.reconcile]));
    assert.deepEqual(out.map(({ event }) => [event.cause, event.span_id]), [["http_rejected", refused.patch.spanId]]);
  });

  void test("a refusal never retried is http_rejected: without spans, once the window for its retry is over", () => {
    const { correlator, out, advance } = setup({ windowMs: 2000 }, false);
    correlator.addSocketEvent(kernelRequest(T0 + 20, 409), identity);
    advance(1000);
    assert.equal(out.length, 0, "waits for a retry");
    advance(1500);
    assert.deepEqual(out.map((o) => [o.event.cause, o.event.request?.status_code]), [["http_rejected", 409]]);
  });
});
