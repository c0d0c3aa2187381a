// The exported span, received by a real OTLP/HTTP receiver on loopback. The
// exporter is configured only through the standard OTEL_* variables, as users
// configure it.
import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { PassThrough } from "node:stream";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../../../src/telemetry/log.ts";
import { AgentMetrics } from "../../../src/telemetry/metrics.ts";
import { createTraceSink, lossAttributes } from "../../../src/sinks/traces.ts";
import { sampleEvent } from "./sampleEvent.ts";

// OTLP/JSON shapes, only the parts asserted here.
interface JsonAnyValue {
  stringValue?: string;
  intValue?: number | string;
}
interface JsonSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  startTimeUnixNano: string | number;
  endTimeUnixNano: string | number;
  attributes: { key: string; value: JsonAnyValue }[];
  status: { code: number; message?: string };
}
interface JsonExport {
  resourceSpans: {
    resource: { attributes: { key: string; value: JsonAnyValue }[] };
    scopeSpans: { spans: JsonSpan[] }[];
  }[];
}

let receiver: Server;
const received: { contentType: string | undefined; body: JsonExport; raw: Buffer }[] = [];

before(async () => {
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.url === "/v1/traces") {
        const raw = Buffer.concat(chunks);
        const contentType = req.headers["content-type"];
        const body = (contentType === "application/json" ? JSON.parse(raw.toString("utf8")) : { resourceSpans: [] }) as JsonExport;
        received.push({ contentType, body, raw });
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  receiver.listen(0, "127.0.0.1");
  await once(receiver, "listening");
  const { port } = receiver.address() as AddressInfo;
  process.env.OTEL_TRACES_EXPORTER = "otlp";
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = `http://127.0.0.1:${port}`;
  process.env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL = "http/json";
  process.env.OTEL_BSP_SCHEDULE_DELAY = "20";
  process.env.OTEL_NODE_RESOURCE_DETECTORS = "none";
  delete process.env.OTEL_SERVICE_NAME;
});

after(async () => {
  await new Promise<void>((resolve) => receiver.close(() => resolve()));
});

function spans(): { span: JsonSpan; resource: Map<string, JsonAnyValue> }[] {
  return received.flatMap(({ body }) =>
    body.resourceSpans.flatMap((rs) =>
      rs.scopeSpans.flatMap((ss) =>
        ss.spans.map((span) => ({ span, resource: new Map(rs.resource.attributes.map((a) => [a.key, a.value])) })),
      ),
    ),
  );
}

void describe("trace sink", () => {
  void it("exports a 'status write lost' span into the operator's trace, at the kernel time, with the attributes", async () => {
    received.length = 0;
    const sink = await createTraceSink({ enabled: true });
    const event = sampleEvent({ time: "2026-12-02T15:04:05.123456789Z" });
    sink.export(event);
    // Not matched to a span: nothing to hang it on, so nothing is exported.
    sink.export(sampleEvent({ trace_id: null, span_id: null, correlation: "none", pid: 7 }));
    await sink.shutdown();

    assert.equal(received[0]?.contentType, "application/json");
    const all = spans();
    assert.equal(all.length, 1);
    const [{ span, resource } = assert.fail("no span")] = all;
    assert.equal(span.name, "status write lost");
    assert.equal(span.traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert.equal(span.parentSpanId, "00f067aa0ba902b7");
    assert.notEqual(span.spanId, span.parentSpanId);
    assert.equal(span.kind, 1, "SPAN_KIND_INTERNAL");
    assert.equal(span.status.code, 2, "STATUS_CODE_ERROR");
    assert.equal(span.status.message, "write_failed EPIPE");
    assert.equal(String(span.startTimeUnixNano), "1796223845123456789");
    assert.equal(String(span.endTimeUnixNano), "1796223845123456789");
    assert.equal(resource.get("service.name")?.stringValue, "lostwrite");

    const attributes = Object.fromEntries(span.attributes.map((a) => [a.key, a.value.stringValue ?? Number(a.value.intValue)]));
    assert.deepEqual(attributes, {
      "lostwrite.cause": "write_failed",
      "lostwrite.errno": "EPIPE",
      "lostwrite.syscall": "write",
      "lostwrite.noticed": "no",
      "process.pid": 4242,
      "thread.id": 4250,
      "k8s.namespace.name": "ops",
      "k8s.pod.name": "widget-operator-7d9",
      "k8s.container.name": "manager",
      "server.address": "10.96.0.1",
      "server.port": 443,
      "error.type": "EPIPE",
    });
  });

  void it("never throws into the data path on bad ids or times; counts and logs them once", async () => {
    const out = new PassThrough();
    let logged = "";
    out.on("data", (c: Buffer) => (logged += c.toString("utf8")));
    const metrics = new AgentMetrics();
    const sink = await createTraceSink({ enabled: true, serviceName: "lostwrite-test", logger: createLogger(out), metrics });
    received.length = 0;
    assert.doesNotThrow(() => {
      sink.export(sampleEvent({ trace_id: "not-hex", span_id: "00f067aa0ba902b7" }));
      sink.export(sampleEvent({ trace_id: "00000000000000000000000000000000" }));
      sink.export(sampleEvent({ time: "yesterday" }));
    });
    sink.export(sampleEvent({ trace_id: "0af7651916cd43dd8448eb211c80319c", span_id: "b7ad6b7169203331" }));
    await sink.shutdown();

    const dropped = (await metrics.eventsDropped.get()).values.find((v) => v.labels.stage === "traces")?.value;
    assert.equal(dropped, 3);
    const lines = logged.trim().split("\n").map((l) => JSON.parse(l) as { msg: string; suppressed?: number });
    assert.deepEqual(
      lines.map((l) => l.msg),
      ["loss event not exported as a span: invalid trace_id or span_id", "loss event not exported as a span: time is not RFC 3339"],
    );
    const exported = spans();
    assert.equal(exported.length, 1);
    assert.equal(exported[0]?.span.traceId, "0af7651916cd43dd8448eb211c80319c");
    assert.equal(exported[0]?.resource.get("service.name")?.stringValue, "lostwrite-test");
  });

  void it("speaks OTLP protobuf by default", async () => {
    const saved = process.env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL;
    delete process.env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL;
    received.length = 0;
    try {
      const sink = await createTraceSink({ enabled: true });
      sink.export(sampleEvent());
      await sink.shutdown();
    } finally {
      process.env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL = saved;
    }
    assert.equal(received.length, 1);
    const { contentType, raw } = received[0] ?? assert.fail("nothing received");
    assert.equal(contentType, "application/x-protobuf");
    // Protobuf carries ids as raw bytes: the operator's trace id and the parent span id are in the body.
    assert.ok(raw.includes(Buffer.from("4bf92f3577b34da6a3ce929d0e0e4736", "hex")), "trace id");
    assert.ok(raw.includes(Buffer.from("00f067aa0ba902b7", "hex")), "parent span id");
    assert.ok(raw.includes(Buffer.from("status write lost")), "span name");
  });

  void it("is a no-op when disabled", async () => {
    received.length = 0;
    const sink = await createTraceSink({ enabled: false });
    sink.export(sampleEvent());
    await sink.shutdown();
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(received.length, 0);
  });

  void it("logs an unreachable collector instead of throwing, and shutdown is bounded", async () => {
    const saved = process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
    // Port 9 on loopback: nothing listens, the connection is refused.
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = "http://127.0.0.1:9";
    process.env.OTEL_EXPORTER_OTLP_TIMEOUT = "300";
    const out = new PassThrough();
    let logged = "";
    out.on("data", (c: Buffer) => (logged += c.toString("utf8")));
    try {
      const sink = await createTraceSink({ enabled: true, logger: createLogger(out), shutdownTimeoutMs: 1000 });
      for (let i = 0; i < 5; i++) assert.doesNotThrow(() => sink.export(sampleEvent({ pid: i })));
      const deadline = Date.now() + 5000;
      while (!logged.includes("ECONNREFUSED") && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      const started = Date.now();
      await sink.shutdown();
      assert.ok(Date.now() - started < 2000, "shutdown waited past its timeout");
    } finally {
      process.env.OTEL_EXPORTER_OTLP_ENDPOINT = saved;
      delete process.env.OTEL_EXPORTER_OTLP_TIMEOUT;
    }
    const lines = logged.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as { level: string; msg: string });
    assert.ok(lines.length >= 1, "the failure was logged");
    assert.ok(lines.every((l) => l.level === "warn"), logged);
    assert.match(logged, /ECONNREFUSED/);
  });
});

void describe("loss span attributes", () => {
  void it("leaves unknown fields out instead of inventing them", () => {
    const attributes = lossAttributes(
      sampleEvent({
        cause: "connection_closed_unanswered",
        errno: null,
        syscall: null,
        namespace: null,
        pod: null,
        container: null,
        apiserver: null,
        tid: null,
        noticed: "unknown",
      }),
    );
    assert.deepEqual(attributes, {
      "lostwrite.cause": "connection_closed_unanswered",
      "lostwrite.noticed": "unknown",
      "process.pid": 4242,
      "error.type": "connection_closed_unanswered",
    });
  });

});
