import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { gzipSync } from "node:zlib";
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { AgentMetrics } from "../../../../src/telemetry/metrics.ts";
import type { IndexedSpan } from "../../../../src/sources/spans/indexedSpans.ts";
import { type OtlpReceiver, startOtlpReceiver } from "../../../../src/sources/spans/otlpReceiver.ts";
import { SpanIntake } from "../../../../src/sources/spans/spanIntake.ts";
import { jsonBody, protobufBody, type SpanDef } from "./otlpSpans.ts";

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const T0 = Date.UTC(2026, 11, 2, 15, 4, 5);

const reconcile: SpanDef = {
  traceId: TRACE,
  spanId: "00f067aa0ba902b7",
  name: "reconcile widget",
  startMs: T0,
  endMs: T0 + 50,
  attributes: { controller: "widget", controllerKind: "Widget", namespace: "default", name: "w1" },
  resource: { "process.pid": 1, "k8s.pod.name": "widget-operator-7d9", "k8s.namespace.name": "ops", "service.name": "widget-operator" },
};
const patch: SpanDef = {
  traceId: TRACE,
  spanId: "b7ad6b7169203331",
  parentSpanId: "00f067aa0ba902b7",
  name: "PATCH",
  kind: SpanKind.CLIENT,
  startMs: T0 + 10,
  endMs: T0 + 20.5,
  status: SpanStatusCode.ERROR,
  attributes: {
    "http.request.method": "PATCH",
    "url.full": "https://10.96.0.1:443/apis/example.com/v1/namespaces/default/widgets/w1/status?fieldManager=op",
    "server.address": "10.96.0.1",
    "server.port": 443,
    "error.type": "connection reset",
    "irrelevant.attribute": "dropped at intake",
  },
  resource: reconcile.resource,
};

async function post(
  port: number,
  body: Buffer,
  headers: Record<string, string>,
  path = "/v1/traces",
): Promise<{ status: number; headers: Headers; text: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { method: "POST", headers, body });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

void describe("OTLP receiver", () => {
  let metrics: AgentMetrics;
  let receiver: OtlpReceiver;
  let received: { spans: IndexedSpan[]; peer: string }[] = [];
  let accept = true;

  before(async () => {
    metrics = new AgentMetrics();
    const intake = new SpanIntake({
      metrics,
      onSpans: (spans, peer) => {
        if (!accept) return false;
        received.push({ spans, peer: peer.address });
        return true;
      },
    });
    receiver = await startOtlpReceiver({ listen: "127.0.0.1:0", maxBodyBytes: 64 * 1024, intake });
  });
  after(() => receiver.close());

  const rejected = async (reason: string): Promise<number> =>
    (await metrics.spansRejected.get()).values.find((v) => v.labels.reason === reason)?.value ?? 0;

  void test("protobuf from the OpenTelemetry serializer is decoded into indexed spans", async () => {
    received = [];
    const res = await post(receiver.address.port, protobufBody([reconcile, patch]), {
      "content-type": "application/x-protobuf",
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "application/x-protobuf");
    assert.equal(received.length, 1);
    assert.equal(received[0]?.peer, "127.0.0.1");
    const [r, p] = received[0]?.spans ?? [];
    assert.deepEqual(r?.reconcile, { controller: "widget", kind: "Widget", namespace: "default", name: "w1" });
    assert.equal(r?.parentSpanId, null);
    assert.equal(p?.kind, "client");
    assert.equal(p?.parentSpanId, "00f067aa0ba902b7");
    assert.equal(p?.status, "error");
    // The SDK's serializer goes through a double: nanoseconds are exact to about 256 ns.
    const near = (actual: bigint | undefined, expected: bigint): boolean =>
      actual !== undefined && (actual > expected ? actual - expected : expected - actual) < 1_000n;
    assert.ok(near(p?.startNs, BigInt(T0 + 10) * 1_000_000n), String(p?.startNs));
    assert.ok(near(p?.endNs, BigInt(T0 + 20) * 1_000_000n + 500_000n), String(p?.endNs));
    assert.deepEqual(p?.request, {
      method: "PATCH",
      path: "/apis/example.com/v1/namespaces/default/widgets/w1/status",
      statusCode: null,
      serverAddress: "10.96.0.1",
      serverPort: 443,
      errorType: "connection reset",
    });
    assert.equal(p?.attributes["irrelevant.attribute"], undefined);
    assert.deepEqual(p?.process, {
      sender: "claimed",
      pid: 1,
      hostPid: null,
      podUid: null,
      podName: "widget-operator-7d9",
      namespace: "ops",
      containerId: null,
      serviceName: "widget-operator",
      peerAddress: "127.0.0.1",
    });
  });

  void test("JSON and protobuf of the same spans decode to the same spans", async () => {
    received = [];
    await post(receiver.address.port, protobufBody([reconcile, patch]), { "content-type": "application/x-protobuf" });
    const res = await post(receiver.address.port, jsonBody([reconcile, patch]), {
      "content-type": "application/json; charset=utf-8",
    });
    assert.equal(res.status, 200);
    assert.equal(res.text, "{}");
    assert.equal(received.length, 2);
    assert.deepEqual(received[1]?.spans, received[0]?.spans);
  });

  void test("gzip bodies are accepted", async () => {
    received = [];
    const res = await post(receiver.address.port, gzipSync(protobufBody([patch])), {
      "content-type": "application/x-protobuf",
      "content-encoding": "gzip",
    });
    assert.equal(res.status, 200);
    assert.equal(received[0]?.spans[0]?.spanId, "b7ad6b7169203331");
  });

  void test("spansReceived counts accepted spans", async () => {
    const before = (await metrics.spansReceived.get()).values[0]?.value ?? 0;
    await post(receiver.address.port, protobufBody([reconcile, patch]), { "content-type": "application/x-protobuf" });
    assert.equal((await metrics.spansReceived.get()).values[0]?.value, before + 2);
  });

  void test("wrong content type: 415, counted", async () => {
    const n = await rejected("unsupported_media_type");
    const res = await post(receiver.address.port, Buffer.from("x"), { "content-type": "text/plain" });
    assert.equal(res.status, 415);
    const res2 = await post(receiver.address.port, protobufBody([patch]), {
      "content-type": "application/x-protobuf",
      "content-encoding": "br",
    });
    assert.equal(res2.status, 415);
    assert.equal(await rejected("unsupported_media_type"), n + 2);
  });

  void test("malformed protobuf, JSON, ids and gzip: 400, counted", async () => {
    const n = await rejected("malformed");
    const bodies: [Buffer, Record<string, string>][] = [
      [protobufBody([patch]).subarray(0, 40), { "content-type": "application/x-protobuf" }],
      [Buffer.from("{not json"), { "content-type": "application/json" }],
      [Buffer.from('{"resourceSpans":"nope"}'), { "content-type": "application/json" }],
      [jsonBody([{ ...patch, traceId: "00000000000000000000000000000000" }]), { "content-type": "application/json" }],
      [Buffer.from("not gzip at all"), { "content-type": "application/x-protobuf", "content-encoding": "gzip" }],
    ];
    for (const [body, headers] of bodies) {
      const res = await post(receiver.address.port, body, headers);
      assert.equal(res.status, 400, `${headers["content-type"]}: ${res.text}`);
    }
    assert.equal(await rejected("malformed"), n + bodies.length);
  });

  void test("body too large before and after decompression: 413", async () => {
    const n = await rejected("too_large");
    const big = Buffer.alloc(65 * 1024, 1);
    const res = await post(receiver.address.port, big, { "content-type": "application/x-protobuf" });
    assert.equal(res.status, 413);
    // Small on the wire, over the limit once inflated.
    const bomb = gzipSync(Buffer.alloc(10 * 1024 * 1024));
    assert.ok(bomb.length < 64 * 1024);
    const res2 = await post(receiver.address.port, bomb, {
      "content-type": "application/x-protobuf",
      "content-encoding": "gzip",
    });
    assert.equal(res2.status, 413);
    assert.match(res2.text, /decompressed/);
    assert.equal(await rejected("too_large"), n + 2);
  });

  void test("intake queue full: 429 with Retry-After, counted", async () => {
    const n = await rejected("queue_full");
    accept = false;
    try {
      const res = await post(receiver.address.port, protobufBody([patch]), { "content-type": "application/x-protobuf" });
      assert.equal(res.status, 429);
      assert.match(res.headers.get("retry-after") ?? "", /^\d+$/);
    } finally {
      accept = true;
    }
    assert.equal(await rejected("queue_full"), n + 1);
  });

  void test("other methods: 405; other paths: 404", async () => {
    const res = await fetch(`http://127.0.0.1:${receiver.address.port}/v1/traces`);
    assert.equal(res.status, 405);
    assert.equal(await rejected("method_not_allowed"), 1);
    const res2 = await post(receiver.address.port, Buffer.alloc(0), { "content-type": "application/json" }, "/v1/logs");
    assert.equal(res2.status, 404);
  });
});

void describe("OTLP receiver --otlp-forward", () => {
  void test("passes accepted batches upstream byte for byte with their headers", async () => {
    const seen: { headers: IncomingHttpHeaders; body: Buffer }[] = [];
    let gotOne!: () => void;
    const got = new Promise<void>((resolve) => (gotOne = resolve));
    const upstream = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        seen.push({ headers: req.headers, body: Buffer.concat(chunks) });
        res.writeHead(200).end();
        if (seen.length === 2) gotOne();
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    const metrics = new AgentMetrics();
    const intake = new SpanIntake({
      forwardUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1/traces`,
      metrics,
      onSpans: () => true,
    });
    const receiver = await startOtlpReceiver({ listen: "127.0.0.1:0", maxBodyBytes: 64 * 1024, intake });
    try {
      const gz = gzipSync(protobufBody([patch]));
      const json = jsonBody([reconcile]);
      await post(receiver.address.port, gz, { "content-type": "application/x-protobuf", "content-encoding": "gzip" });
      await post(receiver.address.port, Buffer.from("garbage"), { "content-type": "application/x-protobuf" });
      await post(receiver.address.port, json, { "content-type": "application/json" });
      await got;
      assert.equal(seen.length, 2, "the malformed batch is not forwarded");
      assert.deepEqual(seen[0]?.body, gz);
      assert.equal(seen[0]?.headers["content-encoding"], "gzip");
      assert.equal(seen[0]?.headers["content-type"], "application/x-protobuf");
      assert.deepEqual(seen[1]?.body, json);
      assert.equal(seen[1]?.headers["content-type"], "application/json");
    } finally {
      await receiver.close();
      await intake.close();
      upstream.close();
    }
  });

  void test("an unreachable upstream is counted, not fatal", async () => {
    const metrics = new AgentMetrics();
    const intake = new SpanIntake({ forwardUrl: "http://127.0.0.1:1/v1/traces", metrics, onSpans: () => true });
    const receiver = await startOtlpReceiver({ listen: "127.0.0.1:0", maxBodyBytes: 64 * 1024, intake });
    const res = await post(receiver.address.port, protobufBody([patch]), { "content-type": "application/x-protobuf" });
    assert.equal(res.status, 200);
    await receiver.close();
    await intake.close(); // waits for the forward attempt
    const dropped = (await metrics.eventsDropped.get()).values.filter((v) => v.labels.stage === "otlp_forward");
    assert.equal(dropped.reduce((sum, v) => sum + v.value, 0), 1);
  });
});
