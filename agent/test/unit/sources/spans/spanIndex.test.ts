import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { SpanKind } from "@opentelemetry/api";
import { AgentMetrics } from "../../../../src/telemetry/metrics.ts";
import { type IndexedSpan, toIndexedSpans } from "../../../../src/sources/spans/indexedSpans.ts";
import { decodeProtobufTraceRequest } from "../../../../src/sources/spans/otlpProtobuf.ts";
import { SpanIndex } from "../../../../src/sources/spans/spanIndex.ts";
import { readNsPids } from "../../../../src/sources/targets/pidNamespace.ts";
import { protobufBody, type SpanDef } from "./otlpSpans.ts";

const T0 = Date.UTC(2026, 11, 2, 15, 4, 5);
const ns = (ms: number): bigint => BigInt(ms) * 1_000_000n;
let n = 1;

function span(over: Partial<SpanDef> & { resource: SpanDef["resource"] }): IndexedSpan {
  const def: SpanDef = {
    traceId: (n++).toString(16).padStart(32, "0"),
    spanId: (n++).toString(16).padStart(16, "0"),
    name: "PATCH",
    kind: SpanKind.CLIENT,
    startMs: T0,
    endMs: T0 + 10,
    ...over,
  };
  const [s] = toIndexedSpans(decodeProtobufTraceRequest(protobufBody([def])), "127.0.0.1");
  assert.ok(s);
  return s;
}

async function counter(metrics: AgentMetrics, reason: string): Promise<number> {
  return (await metrics.spanIndexEvictions.get()).values.find((v) => v.labels.reason === reason)?.value ?? 0;
}

void describe("span index", () => {
  void test("finds the spans of a process open at a time, with slack", () => {
    const metrics = new AgentMetrics();
    const index = new SpanIndex({ capacity: 100, maxAgeMs: 60_000, metrics });
    const mine = span({ resource: { "process.pid": 7 }, startMs: T0, endMs: T0 + 10 });
    const other = span({ resource: { "process.pid": 8 }, startMs: T0, endMs: T0 + 10 });
    index.add([mine, other]);
    const proc = { nsPid: 7, namespace: null, pod: null };
    assert.deepEqual(index.openAt(proc, ns(T0 + 5), 0n), [mine]);
    assert.deepEqual(index.openAt(proc, ns(T0 + 12), 0n), []);
    assert.deepEqual(index.openAt(proc, ns(T0 + 12), ns(3) - ns(0)), [mine]);
    assert.equal(index.latestEndNs(proc), mine.endNs);
    assert.equal(index.get(mine.traceId, mine.spanId), mine);
  });

  void test("the same pid in two pods: spans are kept apart by pod", () => {
    const index = new SpanIndex({ capacity: 100, maxAgeMs: 60_000, metrics: new AgentMetrics() });
    const a = span({ resource: { "process.pid": 1, "k8s.pod.name": "a", "k8s.namespace.name": "ops" } });
    const b = span({ resource: { "process.pid": 1, "k8s.pod.name": "b", "k8s.namespace.name": "ops" }, endMs: T0 + 20 });
    index.add([a, b]);
    assert.deepEqual(index.openAt({ nsPid: 1, namespace: "ops", pod: "a" }, ns(T0 + 5), 0n), [a]);
    assert.equal(index.latestEndNs({ nsPid: 1, namespace: "ops", pod: "a" }), a.endNs);
    // A span without process.pid is found through its pod.
    const c = span({ resource: { "k8s.pod.name": "a", "k8s.namespace.name": "ops" } });
    index.add([c]);
    assert.deepEqual(index.openAt({ nsPid: 1, namespace: "ops", pod: "a" }, ns(T0 + 5), 0n), [a, c]);
  });

  void test("bounded by count: the oldest received is evicted and counted", async () => {
    const metrics = new AgentMetrics();
    const index = new SpanIndex({ capacity: 3, maxAgeMs: 60_000, metrics });
    const all = [1, 2, 3, 4, 5].map(() => span({ resource: { "process.pid": 7 } }));
    for (const s of all) index.add([s]);
    assert.equal(index.size, 3);
    assert.equal(index.get(all[0]!.traceId, all[0]!.spanId), undefined);
    assert.ok(index.get(all[4]!.traceId, all[4]!.spanId));
    assert.equal(await counter(metrics, "capacity"), 2);
    assert.equal((await metrics.spanIndexSize.get()).values[0]?.value, 3);
  });

  void test("bounded by age, on the injected clock", async () => {
    const metrics = new AgentMetrics();
    let now = 1_000;
    const index = new SpanIndex({ capacity: 100, maxAgeMs: 5_000, metrics, now: () => now });
    index.add([span({ resource: { "process.pid": 7 } })]);
    now += 3_000;
    index.add([span({ resource: { "process.pid": 7 } })]);
    now += 2_500;
    index.evictExpired();
    assert.equal(index.size, 1);
    now += 3_000;
    index.evictExpired();
    assert.equal(index.size, 0);
    assert.equal(await counter(metrics, "age"), 2);
    assert.equal(index.latestEndNs({ nsPid: 7, namespace: null, pod: null }), null, "nothing held, nothing known");
  });

  void test("a process in its own PID namespace: its process.pid is found through its NSpid", async (t) => {
    if (process.getuid?.() !== 0) {
      if (process.env.CI === "true") assert.fail("needs root for unshare --pid");
      t.skip("needs root for unshare --pid");
      return;
    }
    const child = spawn("unshare", ["--pid", "--fork", "--kill-child", "--mount-proc", "sleep", "30"], { stdio: "ignore" });
    try {
      // unshare forks: the sleep is its child, pid 1 in the new namespace.
      let targetPid: number | null = null;
      for (let i = 0; i < 100 && targetPid === null; i++) {
        await sleep(20);
        const children = await readFile(`/proc/${child.pid}/task/${child.pid}/children`, "utf8").catch(() => "");
        const first = Number(children.trim().split(/\s+/)[0]);
        if (Number.isInteger(first) && first > 0) targetPid = first;
      }
      assert.ok(targetPid !== null, "the namespaced process appeared");
      const nsPids = await readNsPids("/proc", targetPid);
      assert.deepEqual(nsPids, [targetPid, 1]);

      const index = new SpanIndex({ capacity: 100, maxAgeMs: 60_000, metrics: new AgentMetrics() });
      const fromTarget = span({ resource: { "process.pid": 1 } });
      const fromHostPid = span({ resource: { "process.pid": targetPid } });
      index.add([fromTarget, fromHostPid]);
      const innermost = nsPids?.[nsPids.length - 1] ?? null;
      assert.deepEqual(index.openAt({ nsPid: innermost, namespace: null, pod: null }, ns(T0 + 5), 0n), [fromTarget]);
    } finally {
      child.kill("SIGKILL");
    }
  });
});
