// Span senders over real sockets, from distinct loopback addresses standing
// in for pod IPs: in Kubernetes mode the address a request comes from decides
// whose spans they are. A spoofed sender is refused and counted; two
// operators that are both pid 1 in their own pods, with no k8s.pod.name in
// their resources, get their own spans and not each other's. (Every 127/8
// address is this network namespace's own, so a sender that is no pod of the
// node needs another namespace: agent/test/e2e/spanSenders.test.ts.)
import assert from "node:assert/strict";
import { request } from "node:http";
import { after, before, describe, test } from "node:test";
import { ProtobufTraceSerializer } from "@opentelemetry/otlp-transformer";
import { AgentMetrics } from "../../../../src/telemetry/metrics.ts";
import { type OtlpReceiver, startOtlpReceiver } from "../../../../src/sources/spans/otlpReceiver.ts";
import { SpanIndex } from "../../../../src/sources/spans/spanIndex.ts";
import { SpanIntake } from "../../../../src/sources/spans/spanIntake.ts";
import { PodSchema } from "../../../../src/sources/targets/kubernetes/objects.ts";
import { senderDirectoryOf } from "../../../../src/sources/targets/kubernetes/podAddresses.ts";
import { protobufBody, type SpanDef } from "./otlpSpans.ts";

const T0 = Date.UTC(2026, 11, 3, 9, 0, 0);
const ns = (ms: number): bigint => BigInt(ms) * 1_000_000n;

const pods = ["widget-a", "widget-b"].map((name, i) =>
  PodSchema.parse({
    metadata: { name, namespace: "ops", uid: `uid-${name}` },
    spec: { nodeName: "node-a", containers: [{ name: "manager" }] },
    status: { phase: "Running", podIP: `127.0.0.${i + 2}`, hostIP: "127.0.0.1" },
  }),
);

let n = 0x100;
function reconcile(resource: SpanDef["resource"]): SpanDef {
  n++;
  return {
    traceId: n.toString(16).padStart(32, "0"),
    spanId: n.toString(16).padStart(16, "0"),
    name: "reconcile widget",
    startMs: T0,
    endMs: T0 + 50,
    attributes: { controller: "widget" },
    resource,
  };
}

/** POSTs an OTLP protobuf body from a chosen local address; the status and the body as received. */
function postFrom(localAddress: string, port: number, body: Buffer): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: "127.0.0.1", port, localAddress, method: "POST", path: "/v1/traces", headers: { "content-type": "application/x-protobuf" } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

void describe("trusted span intake (Kubernetes mode, real sockets)", { timeout: 30_000 }, () => {
  const metrics = new AgentMetrics();
  const index = new SpanIndex({ capacity: 1000, maxAgeMs: 60_000, metrics });
  const directory = senderDirectoryOf(pods);
  let receiver: OtlpReceiver;

  before(async () => {
    const intake = new SpanIntake({
      metrics,
      senders: () => directory,
      onSpans: (spans) => {
        index.add(spans);
        return true;
      },
    });
    receiver = await startOtlpReceiver({ listen: "127.0.0.1:0", maxBodyBytes: 64 * 1024, intake });
  });
  after(() => receiver.close());

  const rejected = async (reason: string): Promise<number> =>
    (await metrics.spansRejected.get()).values.find((v) => v.labels.reason === reason)?.value ?? 0;
  const podA = { nsPid: 1, namespace: "ops", pod: "widget-a" };
  const podB = { nsPid: 1, namespace: "ops", pod: "widget-b" };

  void test("two pid-1 operators without k8s.pod.name each get their own spans, by their address", async () => {
    const a = reconcile({ "process.pid": 1, "service.name": "widget-operator" });
    const b = reconcile({ "process.pid": 1, "service.name": "widget-operator" });
    assert.equal((await postFrom("127.0.0.2", receiver.address.port, protobufBody([a]))).status, 200);
    assert.equal((await postFrom("127.0.0.3", receiver.address.port, protobufBody([b]))).status, 200);
    assert.deepEqual(index.openAt(podA, ns(T0 + 10), 0n).map((s) => s.spanId), [a.spanId]);
    assert.deepEqual(index.openAt(podB, ns(T0 + 10), 0n).map((s) => s.spanId), [b.spanId]);
    assert.equal(index.get(a.traceId, a.spanId)?.process.podUid, "uid-widget-a");
  });

  void test("spans in another pod's name are refused with 403 and counted; the pod's own spans are untouched", async () => {
    const mismatches = await rejected("sender_mismatch");
    const unknown = await rejected("unknown_sender");
    const before = index.openAt(podA, ns(T0 + 10), 0n).length;
    // Pod b claims to be pod a.
    const claim = reconcile({ "process.pid": 1, "k8s.pod.name": "widget-a", "k8s.namespace.name": "ops" });
    const res = await postFrom("127.0.0.3", receiver.address.port, protobufBody([claim]));
    assert.equal(res.status, 403);
    assert.match(res.body.toString(), /k8s\.pod\.name="widget-a", but the sender 127\.0\.0\.3 is pod ops\/widget-b/);
    assert.equal(await rejected("sender_mismatch"), mismatches + 1);
    assert.equal(await rejected("unknown_sender"), unknown);
    assert.equal(index.openAt(podA, ns(T0 + 10), 0n).length, before);
    assert.equal(index.get(claim.traceId, claim.spanId), undefined);
  });

  void test("a request mixing its own resource with another pod's: its own spans are taken, the answer is a partial success", async () => {
    const mismatches = await rejected("sender_mismatch");
    const own = reconcile({ "process.pid": 1 });
    const other = reconcile({ "process.pid": 1, "k8s.pod.name": "widget-a", "k8s.namespace.name": "ops" });
    const res = await postFrom("127.0.0.3", receiver.address.port, protobufBody([own, other]));
    assert.equal(res.status, 200);
    const answer = ProtobufTraceSerializer.deserializeResponse(res.body);
    assert.equal(Number(answer.partialSuccess?.rejectedSpans), 1);
    assert.match(answer.partialSuccess?.errorMessage ?? "", /k8s\.pod\.name="widget-a"/);
    assert.equal(index.get(own.traceId, own.spanId)?.process.podName, "widget-b");
    assert.equal(index.get(other.traceId, other.spanId), undefined);
    assert.equal(await rejected("sender_mismatch"), mismatches + 1);
  });

  void test("the node's own address speaks only for processes outside pods", async () => {
    const mine = reconcile({ "process.pid": 4242 });
    assert.equal((await postFrom("127.0.0.1", receiver.address.port, protobufBody([mine]))).status, 200);
    assert.deepEqual(index.openAt({ nsPid: 4242, namespace: null, pod: null }, ns(T0 + 10), 0n).map((s) => s.spanId), [mine.spanId]);
    const res = await postFrom("127.0.0.1", receiver.address.port, protobufBody([reconcile({ "process.pid": 1, "k8s.pod.name": "widget-a", "k8s.namespace.name": "ops" })]));
    assert.equal(res.status, 403);
  });
});
