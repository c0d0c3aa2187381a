// The span intake stage: OTLP/HTTP and OTLP/gRPC side by side, feeding one
// consumer; gRPC can be turned off; a gRPC port already taken fails start-up
// without leaving the HTTP port behind.
import assert from "node:assert/strict";
import net from "node:net";
import { describe, test } from "node:test";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-grpc";
import { OtlpStage } from "../../src/agentStages.ts";
import { loadConfig } from "../../src/config.ts";
import { AgentMetrics } from "../../src/telemetry/metrics.ts";
import type { IndexedSpan } from "../../src/sources/spans/indexedSpans.ts";
import type { WatchedTarget } from "../../src/sources/targets/targetWatcher.ts";
import { protobufBody, readableSpan, type SpanDef } from "./sources/spans/otlpSpans.ts";

const span: SpanDef = {
  traceId: "6bf92f3577b34da6a3ce929d0e0e4736",
  spanId: "20f067aa0ba902b7",
  name: "reconcile widget",
  startMs: Date.UTC(2026, 11, 3, 9),
  endMs: Date.UTC(2026, 11, 3, 9) + 50,
  // This test process sends it, as itself.
  resource: { "process.pid": process.pid },
};

/** The target source with one target: this test process, outside any pod. */
const thisProcess = {
  pids: () => [process.pid],
  target: (pid: number): WatchedTarget | undefined =>
    pid === process.pid
      ? { pid, comm: "node", cmdline: "", source: "pid", nsPids: [pid], sinceMs: 0, identity: { pid, process: "node", namespace: "", pod: "", container: "", controller: "" } }
      : undefined,
};
const noTargets = { pids: () => [], target: () => undefined };
const log = { warnRateLimited: () => {} };

void describe("OTLP stage", { timeout: 30_000 }, () => {
  void test("takes spans over HTTP and gRPC into one consumer", async () => {
    const received: IndexedSpan[][] = [];
    const config = loadConfig([{ name: "test", values: { "otlp-listen": "127.0.0.1:0", "otlp-grpc-listen": "127.0.0.1:0" } }]);
    const stage = new OtlpStage(config, new AgentMetrics(), null, (spans) => received.push(spans) > 0, () => null, thisProcess, log);
    await stage.start();
    try {
      const grpcAddress = stage.grpcAddress;
      assert.ok(grpcAddress);
      const res = await fetch(`http://127.0.0.1:${stage.address.port}/v1/traces`, {
        method: "POST",
        headers: { "content-type": "application/x-protobuf" },
        body: protobufBody([span]),
      });
      assert.equal(res.status, 200);
      const exporter = new OTLPTraceExporter({ url: `http://127.0.0.1:${grpcAddress.port}` });
      const result = await new Promise<{ code: number }>((resolve) => exporter.export([readableSpan(span)], resolve));
      await exporter.shutdown();
      assert.equal(result.code, 0);
      assert.deepEqual(received.map((batch) => batch.map((s) => s.spanId)), [[span.spanId], [span.spanId]]);
      // Proven by the connection on both transports: this process, by its host pid.
      assert.deepEqual(received.map((batch) => [batch[0]?.process.sender, batch[0]?.process.hostPid]), [["process", process.pid], ["process", process.pid]]);
    } finally {
      await stage.stop();
    }
  });

  void test("--otlp-grpc-listen off: HTTP only", async () => {
    const config = loadConfig([{ name: "test", values: { "otlp-listen": "127.0.0.1:0", "otlp-grpc-listen": "off" } }]);
    const stage = new OtlpStage(config, new AgentMetrics(), null, () => true, () => null, noTargets, log);
    await stage.start();
    assert.equal(stage.grpcAddress, null);
    await stage.stop();
  });

  void test("a gRPC port already taken fails start-up, naming it, and the HTTP port is let go", async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    const port = (taken.address() as net.AddressInfo).port;
    const httpPort = await new Promise<number>((resolve) => {
      const probe = net.createServer().listen(0, "127.0.0.1", () => {
        const p = (probe.address() as net.AddressInfo).port;
        probe.close(() => resolve(p));
      });
    });
    try {
      const config = loadConfig([{ name: "test", values: { "otlp-listen": `127.0.0.1:${httpPort}`, "otlp-grpc-listen": `127.0.0.1:${port}` } }]);
      const stage = new OtlpStage(config, new AgentMetrics(), null, () => true, () => null, noTargets, log);
      await assert.rejects(stage.start(), new RegExp(`otlpGrpcListen: cannot listen on 127\\.0\\.0\\.1:${port}`));
      // The HTTP port is free again.
      const again = net.createServer();
      await new Promise<void>((resolve, reject) => {
        again.once("error", reject);
        again.listen(httpPort, "127.0.0.1", resolve);
      });
      again.close();
    } finally {
      taken.close();
    }
  });
});
