// 10,000 malformed OTLP bodies against the real receiver over loopback HTTP:
// no crash, the right status code for each kind of damage, bounded memory.
// Seeded, so a failure reproduces.
import assert from "node:assert/strict";
import { Agent, request } from "node:http";
import { test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { gzipSync } from "node:zlib";
import { SpanKind } from "@opentelemetry/api";
import { AgentMetrics } from "../../../../src/telemetry/metrics.ts";
import { startOtlpReceiver } from "../../../../src/sources/spans/otlpReceiver.ts";
import { SpanIntake } from "../../../../src/sources/spans/spanIntake.ts";
import { jsonBody, protobufBody } from "./otlpSpans.ts";

const MAX_BODY = 256 * 1024;
const TOTAL = 10_000;

/** mulberry32: small, seeded, good enough to vary inputs. */
function rng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function varint(n: number): number[] {
  const out: number[] = [];
  let v = n;
  while (v >= 0x80) {
    out.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  out.push(v);
  return out;
}

function nestedArrays(depth: number): Buffer {
  // Built inside out; each level wraps the previous one in ArrayValue.values (1) and AnyValue.array_value (5).
  let inner = Buffer.from([0x0a, 0x00]);
  for (let d = 0; d < depth; d++) {
    const av = Buffer.concat([Buffer.from([0x2a, ...varint(inner.length)]), inner]);
    inner = Buffer.concat([Buffer.from([0x0a, ...varint(av.length)]), av]);
  }
  return inner;
}

interface Case {
  body: Buffer;
  headers: Record<string, string>;
  /** Acceptable answers: damage can leave a body that still decodes (e.g. random bytes that happen to be valid). */
  expect: number[];
}

const PB = { "content-type": "application/x-protobuf" };
const JSON_CT = { "content-type": "application/json" };

function makeCases(): Case[] {
  const random = rng(0x5eed);
  const int = (n: number): number => Math.floor(random() * n);
  const valid = protobufBody([
    {
      traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
      spanId: "b7ad6b7169203331",
      parentSpanId: "00f067aa0ba902b7",
      name: "PATCH",
      kind: SpanKind.CLIENT,
      startMs: 1_796_000_000_000,
      endMs: 1_796_000_000_010,
      attributes: { "http.request.method": "PATCH", "url.path": "/apis/x/v1/widgets/w1/status" },
      resource: { "process.pid": 7 },
    },
  ]);
  const validJson = jsonBody([
    {
      traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
      spanId: "b7ad6b7169203331",
      name: "reconcile",
      startMs: 1_796_000_000_000,
      endMs: 1_796_000_000_010,
    },
  ]).toString();
  const bomb = gzipSync(Buffer.alloc(200 * 1024 * 1024)); // 200 MiB of zeros in ~200 KiB
  const nested = [10, 100, 1000, 5000].map(nestedArrays);
  const cases: Case[] = [];
  for (let i = 0; i < TOTAL; i++) {
    switch (i % 8) {
      case 0: {
        // Random bytes.
        const body = Buffer.alloc(1 + int(512));
        for (let j = 0; j < body.length; j++) body[j] = int(256);
        cases.push({ body, headers: PB, expect: [200, 400] });
        break;
      }
      case 1: // Truncated valid protobuf.
        cases.push({ body: valid.subarray(0, 1 + int(valid.length - 1)), headers: PB, expect: [200, 400] });
        break;
      case 2: {
        // A field that declares a huge length it does not have.
        const field = [0x0a, ...varint(0x7fff_ffff + int(1_000_000))];
        cases.push({ body: Buffer.from([...field, 1, 2, 3]), headers: PB, expect: [400] });
        break;
      }
      case 3: {
        // Wrong types in JSON.
        const wrong = [
          '{"resourceSpans":{}}',
          '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":42}]}]}]}',
          '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","spanId":"b7ad6b7169203331"}]}]}]}',
          '{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":"soon"}]}]}]}',
          "[]",
          "null",
          validJson.slice(0, 1 + int(validJson.length - 2)),
          `{"resourceSpans":[{"resource":{"attributes":[{"key":"process.pid","value":{"intValue":"${"9".repeat(30)}"}}]}}]}`,
        ];
        cases.push({ body: Buffer.from(wrong[int(wrong.length)] ?? "x"), headers: JSON_CT, expect: [400] });
        break;
      }
      case 4: // Valid protobuf with flipped bytes.
      {
        const body = Buffer.from(valid);
        for (let k = 0; k < 3; k++) body[int(body.length)] = int(256);
        cases.push({ body, headers: PB, expect: [200, 400] });
        break;
      }
      case 5: // Gzip bomb, now and then (each one costs a little inflate work).
        if (i % 400 === 5) cases.push({ body: bomb, headers: { ...PB, "content-encoding": "gzip" }, expect: [413] });
        else cases.push({ body: gzipSync(valid).subarray(0, 10 + int(20)), headers: { ...PB, "content-encoding": "gzip" }, expect: [400] });
        break;
      case 6: // Over the limit on the wire.
        if (i % 400 === 6) cases.push({ body: Buffer.alloc(MAX_BODY + 1 + int(1000)), headers: PB, expect: [413] });
        else cases.push({ body: Buffer.from("<xml/>"), headers: { "content-type": "text/xml" }, expect: [415] });
        break;
      default: // Deep nesting: AnyValue arrays inside arrays, past protobufjs's nesting limit.
        cases.push({ body: nested[int(nested.length)] ?? Buffer.alloc(0), headers: PB, expect: [200, 400] });
    }
  }
  return cases;
}

/** A full GC, so heap readings compare live data rather than garbage. */
function collectGarbage(): void {
  setFlagsFromString("--expose-gc");
  (runInNewContext("gc") as () => void)();
}

/** Heap and Buffer memory; an inflated body would live in the latter. */
function memoryInUse(): { heap: number; buffers: number } {
  const m = process.memoryUsage();
  return { heap: m.heapUsed, buffers: m.arrayBuffers };
}

function send(agent: Agent, port: number, c: Case): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: "127.0.0.1", port, path: "/v1/traces", method: "POST", agent, headers: c.headers },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      },
    );
    // An oversized body may be cut off by the server once it has answered.
    req.on("error", (err: NodeJS.ErrnoException) => (err.code === "EPIPE" || err.code === "ECONNRESET" ? resolve(413) : reject(err)));
    req.end(c.body);
  });
}

void test("10,000 malformed OTLP bodies: no crash, right status codes, bounded memory", { timeout: 60_000 }, async () => {
  const cases = makeCases();
  const metrics = new AgentMetrics();
  let accepted = 0;
  const intake = new SpanIntake({
    metrics,
    onSpans: (spans) => {
      accepted += spans.length;
      return true;
    },
  });
  const receiver = await startOtlpReceiver({ listen: "127.0.0.1:0", maxBodyBytes: MAX_BODY, intake });
  const agent = new Agent({ keepAlive: true, maxSockets: 8 });
  try {
    collectGarbage();
    const memBefore = memoryInUse();
    let peakMem = memBefore;
    // Sampled while requests run: a bomb inflated into memory would show here.
    const sampler = setInterval(() => {
      const m = memoryInUse();
      peakMem = { heap: Math.max(peakMem.heap, m.heap), buffers: Math.max(peakMem.buffers, m.buffers) };
    }, 5);
    const counts = new Map<number, number>();
    const started = Date.now();
    let next = 0;
    const worker = async (): Promise<void> => {
      for (let i = next++; i < cases.length; i = next++) {
        const c = cases[i];
        if (c === undefined) continue;
        const status = await send(agent, receiver.address.port, c);
        assert.ok(c.expect.includes(status), `case ${i} (${c.headers["content-type"]}): got ${status}, expected ${c.expect.join("/")}`);
        counts.set(status, (counts.get(status) ?? 0) + 1);
      }
    };
    try {
      await Promise.all(Array.from({ length: 8 }, worker));
    } finally {
      clearInterval(sampler);
    }
    const elapsed = Date.now() - started;
    collectGarbage();
    const memAfter = memoryInUse();
    console.log(`fuzz: ${TOTAL} bodies in ${elapsed} ms; answers ${JSON.stringify([...counts])}; peak heap +${(peakMem.heap - memBefore.heap) >> 20} MiB, buffers +${(peakMem.buffers - memBefore.buffers) >> 20} MiB`);

    // The receiver still works after all that.
    const ok = await send(agent, receiver.address.port, { body: protobufBody([]), headers: PB, expect: [200] });
    assert.equal(ok, 200);
    assert.ok((counts.get(400) ?? 0) > TOTAL / 2, `400s: ${counts.get(400)}`);
    assert.ok((counts.get(413) ?? 0) >= 40, `413s: ${counts.get(413)}`);
    assert.ok((counts.get(415) ?? 0) > 1000, `415s: ${counts.get(415)}`);
    // 200 MiB bombs were sent 25 times; not one may be inflated into memory.
    // The bound leaves room for uncollected garbage of 10,000 requests.
    const MiB = 1024 * 1024;
    assert.ok(peakMem.buffers - memBefore.buffers < 96 * MiB, `peak buffers grew by ${(peakMem.buffers - memBefore.buffers) >> 20} MiB`);
    // The heap peak includes uncollected garbage of 10,000 requests: a generous bound.
    assert.ok(peakMem.heap - memBefore.heap < 192 * MiB, `peak heap grew by ${(peakMem.heap - memBefore.heap) >> 20} MiB`);
    assert.ok(memAfter.heap + memAfter.buffers - memBefore.heap - memBefore.buffers < 16 * MiB, "memory retained after the run");
    const rejected = (await metrics.spansRejected.get()).values.reduce((sum, v) => sum + v.value, 0);
    assert.equal(rejected, TOTAL - (counts.get(200) ?? 0));
    assert.ok(accepted > 0, "some damaged bodies still decode, and are accepted");
  } finally {
    agent.destroy();
    await receiver.close();
  }
});
