// The OTLP/gRPC intake with the OpenTelemetry SDK's own gRPC exporter as the
// client (what a Node operator would run; Go's otlptracegrpc speaks the same
// protocol), and raw gRPC calls for what no exporter sends: garbage, oversized
// and gzip-bomb messages, unknown methods, stalled calls.
import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";
import { gzipSync } from "node:zlib";
import * as grpc from "@grpc/grpc-js";
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-grpc";
import { ProtobufTraceSerializer } from "@opentelemetry/otlp-transformer";
import { AgentMetrics } from "../../../../src/telemetry/metrics.ts";
import type { IndexedSpan } from "../../../../src/sources/spans/indexedSpans.ts";
import { decodeProtobufTraceRequest } from "../../../../src/sources/spans/otlpProtobuf.ts";
import { EXPORT_PATH, peerAddress, startOtlpGrpcReceiver } from "../../../../src/sources/spans/otlpGrpcReceiver.ts";
import type { OtlpReceiver } from "../../../../src/sources/spans/otlpReceiver.ts";
import type { SenderDirectory } from "../../../../src/sources/spans/senderTrust.ts";
import { SpanIntake } from "../../../../src/sources/spans/spanIntake.ts";
import { protobufBody, readableSpan, type SpanDef } from "./otlpSpans.ts";

const TRACE = "5bf92f3577b34da6a3ce929d0e0e4736";
const T0 = Date.UTC(2026, 11, 3, 9, 0, 0);
const MAX = 64 * 1024;

const reconcile: SpanDef = {
  traceId: TRACE,
  spanId: "10f067aa0ba902b7",
  name: "reconcile widget",
  startMs: T0,
  endMs: T0 + 50,
  attributes: { controller: "widget", controllerKind: "Widget", namespace: "default", name: "w1" },
  resource: { "process.pid": 4242, "service.name": "widget-operator" },
};
const patch: SpanDef = {
  traceId: TRACE,
  spanId: "c7ad6b7169203331",
  parentSpanId: reconcile.spanId,
  name: "PATCH",
  kind: SpanKind.CLIENT,
  startMs: T0 + 10,
  endMs: T0 + 20,
  status: SpanStatusCode.ERROR,
  attributes: { "http.request.method": "PATCH", "url.path": "/apis/example.com/v1/namespaces/default/widgets/w1/status" },
  resource: reconcile.resource,
};

/** Exports with the SDK's gRPC exporter; resolves with its result. */
function exportWith(exporter: OTLPTraceExporter, defs: SpanDef[]): Promise<{ code: number; error?: Error }> {
  return new Promise((resolve) => exporter.export(defs.map(readableSpan), resolve));
}

/** One raw unary call on `path` with `message` as the request bytes. */
function rawCall(
  port: number,
  message: Buffer,
  opts: { path?: string; gzip?: boolean } = {},
): Promise<{ code: grpc.status; details: string; response: Buffer | null }> {
  const client = new grpc.Client(
    `127.0.0.1:${port}`,
    grpc.credentials.createInsecure(),
    opts.gzip ? { "grpc.default_compression_algorithm": grpc.compressionAlgorithms.gzip } : {},
  );
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      opts.path ?? EXPORT_PATH,
      (m: Buffer) => m,
      (b: Buffer) => b,
      message,
      (err, response) => {
        client.close();
        resolve(err ? { code: err.code, details: err.details, response: null } : { code: grpc.status.OK, details: "", response: response ?? null });
      },
    );
  });
}

void describe("OTLP/gRPC receiver", { timeout: 60_000 }, () => {
  const metrics = new AgentMetrics();
  let received: { spans: IndexedSpan[]; peer: string }[] = [];
  let accept = true;
  let directory: SenderDirectory | null = null;
  let receiver: OtlpReceiver;
  let exporter: OTLPTraceExporter;

  before(async () => {
    const intake = new SpanIntake({
      metrics,
      senders: () => directory,
      onSpans: (spans, peer) => {
        if (!accept) return false;
        received.push({ spans, peer: peer.address });
        return true;
      },
    });
    receiver = await startOtlpGrpcReceiver({ listen: "127.0.0.1:0", maxBodyBytes: MAX, intake, maxConcurrentRequests: 2, callTimeoutMs: 500 });
    exporter = new OTLPTraceExporter({ url: `http://127.0.0.1:${receiver.address.port}` });
  });
  after(async () => {
    await exporter.shutdown();
    await receiver.close();
  });

  const rejected = async (reason: string): Promise<number> =>
    (await metrics.spansRejected.get()).values.find((v) => v.labels.reason === reason)?.value ?? 0;

  void test("spans from the OpenTelemetry gRPC exporter are decoded like the HTTP body, with the sender's address", async () => {
    received = [];
    const result = await exportWith(exporter, [reconcile, patch]);
    assert.equal(result.code, 0, String(result.error));
    assert.equal(received.length, 1);
    assert.equal(received[0]?.peer, "127.0.0.1");
    const [r, p] = received[0]?.spans ?? [];
    assert.deepEqual(r?.reconcile, { controller: "widget", kind: "Widget", namespace: "default", name: "w1" });
    assert.equal(p?.kind, "client");
    assert.equal(p?.request?.path, "/apis/example.com/v1/namespaces/default/widgets/w1/status");
    assert.equal(p?.process.pid, 4242);
    assert.equal(p?.process.peerAddress, "127.0.0.1");
    assert.equal((await metrics.spansReceived.get()).values[0]?.value, 2);
  });

  void test("gzip-compressed exports (OTEL_EXPORTER_OTLP_TRACES_COMPRESSION=gzip) are taken", async () => {
    received = [];
    process.env.OTEL_EXPORTER_OTLP_TRACES_COMPRESSION = "gzip";
    const gzipExporter = new OTLPTraceExporter({ url: `http://127.0.0.1:${receiver.address.port}` });
    delete process.env.OTEL_EXPORTER_OTLP_TRACES_COMPRESSION;
    try {
      const result = await exportWith(gzipExporter, [patch]);
      assert.equal(result.code, 0, String(result.error));
      assert.equal(received[0]?.spans[0]?.spanId, patch.spanId);
    } finally {
      await gzipExporter.shutdown();
    }
  });

  void test("garbage bytes: INVALID_ARGUMENT, counted as malformed", async () => {
    const n = await rejected("malformed");
    const res = await rawCall(receiver.address.port, Buffer.from("\xff\xff\xff\xff garbage, not protobuf", "latin1"));
    assert.equal(res.code, grpc.status.INVALID_ARGUMENT);
    assert.match(res.details, /malformed OTLP/);
    const badIds = await rawCall(receiver.address.port, protobufBody([{ ...patch, traceId: "0".repeat(32) }]));
    assert.equal(badIds.code, grpc.status.INVALID_ARGUMENT);
    assert.equal(await rejected("malformed"), n + 2);
  });

  void test("over the size limit as sent or once inflated: RESOURCE_EXHAUSTED, counted as too_large", async () => {
    const n = await rejected("too_large");
    const big = await rawCall(receiver.address.port, Buffer.alloc(MAX + 1, 1));
    assert.equal(big.code, grpc.status.RESOURCE_EXHAUSTED);
    // Small on the wire, 10 MiB once inflated.
    assert.ok(gzipSync(Buffer.alloc(10 << 20)).length < MAX);
    const bomb = await rawCall(receiver.address.port, Buffer.alloc(10 << 20), { gzip: true });
    assert.equal(bomb.code, grpc.status.RESOURCE_EXHAUSTED);
    assert.equal(await rejected("too_large"), n + 2);
    // Still serving.
    assert.equal((await exportWith(exporter, [patch])).code, 0);
  });

  void test("another service or method: UNIMPLEMENTED", async () => {
    const res = await rawCall(receiver.address.port, protobufBody([patch]), { path: "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export" });
    assert.equal(res.code, grpc.status.UNIMPLEMENTED);
    const res2 = await rawCall(receiver.address.port, protobufBody([patch]), { path: "/opentelemetry.proto.collector.trace.v1.TraceService/Other" });
    assert.equal(res2.code, grpc.status.UNIMPLEMENTED);
  });

  void test("intake queue full: UNAVAILABLE (exporters retry it), counted", async () => {
    const n = await rejected("queue_full");
    accept = false;
    try {
      const res = await rawCall(receiver.address.port, protobufBody([patch]));
      assert.equal(res.code, grpc.status.UNAVAILABLE);
    } finally {
      accept = true;
    }
    assert.equal(await rejected("queue_full"), n + 1);
  });

  void test("calls in progress are bounded: one more is UNAVAILABLE; a stalled call is ended and frees its slot", async () => {
    const n = await rejected("queue_full");
    const client = new grpc.Client(`127.0.0.1:${receiver.address.port}`, grpc.credentials.createInsecure());
    // Two calls that send their headers and never their message.
    const stalled = [0, 1].map(
      () =>
        new Promise<grpc.status>((resolve) => {
          client.makeClientStreamRequest(EXPORT_PATH, (m: Buffer) => m, (b: Buffer) => b, (err) => resolve(err?.code ?? grpc.status.OK));
        }),
    );
    await new Promise((r) => setTimeout(r, 100));
    const third = await rawCall(receiver.address.port, protobufBody([patch]));
    assert.equal(third.code, grpc.status.UNAVAILABLE);
    assert.equal(await rejected("queue_full"), n + 1);
    assert.deepEqual(await Promise.all(stalled), [grpc.status.DEADLINE_EXCEEDED, grpc.status.DEADLINE_EXCEEDED]);
    client.close();
    assert.equal((await rawCall(receiver.address.port, protobufBody([patch]))).code, grpc.status.OK);
  });

  void test("Kubernetes mode: the same sender rule as over HTTP, with partial_success in the response", async () => {
    directory = {
      listed: true,
      podAt: () => null,
      isNodeAddress: () => false,
      hostNetworkPod: () => null,
      hostNetworkPodByUid: () => null,
    };
    try {
      const n = await rejected("sender_mismatch");
      const other = { ...patch, spanId: "d7ad6b7169203331", resource: { "process.pid": 1, "k8s.pod.name": "widget-a", "k8s.namespace.name": "ops" } };
      // The exporter gets PERMISSION_DENIED: not retried.
      assert.equal((await exportWith(exporter, [other])).code, 1);
      received = [];
      const mixed = await rawCall(receiver.address.port, protobufBody([patch, other]));
      assert.equal(mixed.code, grpc.status.OK);
      const answer = ProtobufTraceSerializer.deserializeResponse(mixed.response!);
      assert.equal(Number(answer.partialSuccess?.rejectedSpans), 1);
      assert.match(answer.partialSuccess?.errorMessage ?? "", /k8s\.pod\.name="widget-a" names no host-network pod of this node/);
      assert.deepEqual(received[0]?.spans.map((s) => [s.spanId, s.process.sender]), [[patch.spanId, "node"]]);
      assert.equal(await rejected("sender_mismatch"), n + 2);
      const denied = await rawCall(receiver.address.port, protobufBody([other]));
      assert.equal(denied.code, grpc.status.PERMISSION_DENIED);
    } finally {
      directory = null;
    }
  });

  void test("grpc-js's peer text gives the address", () => {
    assert.equal(peerAddress("127.0.0.1:4317"), "127.0.0.1");
    assert.equal(peerAddress("::ffff:10.244.1.7:51234"), "::ffff:10.244.1.7");
    assert.equal(peerAddress("[fd00::7]:51234"), "fd00::7");
    assert.equal(peerAddress("unknown"), null);
  });
});

void describe("OTLP/gRPC receiver --otlp-forward", { timeout: 30_000 }, () => {
  void test("accepted exports go upstream as OTLP/HTTP protobuf, the same message", async () => {
    const seen: { headers: IncomingHttpHeaders; body: Buffer }[] = [];
    let gotOne!: () => void;
    const got = new Promise<void>((resolve) => (gotOne = resolve));
    const upstream = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        seen.push({ headers: req.headers, body: Buffer.concat(chunks) });
        res.writeHead(200).end();
        gotOne();
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    const metrics = new AgentMetrics();
    const intake = new SpanIntake({ metrics, onSpans: () => true, forwardUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1/traces` });
    const receiver = await startOtlpGrpcReceiver({ listen: "127.0.0.1:0", maxBodyBytes: MAX, intake });
    const exporter = new OTLPTraceExporter({ url: `http://127.0.0.1:${receiver.address.port}` });
    try {
      assert.equal((await rawCall(receiver.address.port, Buffer.from("garbage"))).code, grpc.status.INVALID_ARGUMENT);
      assert.equal((await exportWith(exporter, [reconcile, patch])).code, 0);
      await got;
      assert.equal(seen.length, 1, "the malformed message is not forwarded");
      assert.equal(seen[0]?.headers["content-type"], "application/x-protobuf");
      assert.equal(seen[0]?.headers["content-encoding"], undefined);
      const spans = decodeProtobufTraceRequest(seen[0]?.body ?? Buffer.alloc(0)).resourceSpans.flatMap((rs) => rs.spans.map((s) => s.spanId));
      assert.deepEqual(spans.sort(), [reconcile.spanId, patch.spanId].sort());
    } finally {
      await exporter.shutdown();
      await receiver.close();
      await intake.close();
      upstream.close();
    }
  });
});
