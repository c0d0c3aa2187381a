// Who may send spans in whose name (docs/spans.md "Who may send spans").
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { SpanProcess } from "../../../../src/sources/spans/indexedSpans.ts";
import { attributeSender, type SenderDirectory } from "../../../../src/sources/spans/senderTrust.ts";
import { sentBy } from "../../../../src/sources/spans/spanIndex.ts";

const directory: SenderDirectory = {
  listed: true,
  podAt: (address) =>
    address === "10.244.1.7" ? { namespace: "ops", pod: "widget-a", uid: "uid-a" } : address === "10.244.1.8" ? { namespace: "ops", pod: "widget-b", uid: null } : null,
  isNodeAddress: (address) => address === "192.168.1.10",
  hostNetworkPod: (namespace, pod) => (namespace === "kube-system" && pod === "cilium-operator" ? { namespace, pod, uid: "uid-c" } : null),
  hostNetworkPodByUid: (uid) => (uid === "uid-c" ? { namespace: "kube-system", pod: "cilium-operator", uid } : null),
};

function claimed(peerAddress: string | null, resource: Partial<SpanProcess> = {}): SpanProcess {
  return { sender: "claimed", pid: 1, hostPid: null, podUid: null, podName: null, namespace: null, containerId: null, serviceName: "op", peerAddress, ...resource };
}

void describe("sender trust", { timeout: 10_000 }, () => {
  void test("outside Kubernetes mode the resource is taken as sent", () => {
    const p = claimed("10.9.9.9", { podName: "anything", namespace: "ops" });
    assert.deepEqual(attributeSender(p, null), { ok: true, process: p });
  });

  void test("a pod's address makes the spans that pod's, resource or not", () => {
    const bare = attributeSender(claimed("10.244.1.7"), directory);
    assert.ok(bare.ok);
    assert.deepEqual(bare.process, { ...claimed("10.244.1.7"), sender: "pod", namespace: "ops", podName: "widget-a", podUid: "uid-a" });
    // An IPv4 peer of a dual-stack listener.
    const mapped = attributeSender(claimed("::ffff:10.244.1.8", { podName: "widget-b", namespace: "ops" }), directory);
    assert.ok(mapped.ok);
    assert.equal(mapped.process.podName, "widget-b");
  });

  void test("a resource naming another pod than its sender's is refused, naming the key and value", () => {
    for (const [resource, key] of [
      [{ podName: "widget-b" }, 'k8s.pod.name="widget-b"'],
      [{ namespace: "other" }, 'k8s.namespace.name="other"'],
      [{ podUid: "uid-b" }, 'k8s.pod.uid="uid-b"'],
    ] as const) {
      const verdict = attributeSender(claimed("10.244.1.7", resource), directory);
      assert.equal(verdict.ok, false);
      assert.ok(!verdict.ok);
      assert.equal(verdict.reason, "sender_mismatch");
      assert.match(verdict.detail, new RegExp(`resource ${key.replace(".", "\\.")}.*10\\.244\\.1\\.7 is pod ops/widget-a`));
    }
  });

  void test("an address that is no pod of this node, nor the node, is refused", () => {
    for (const peer of ["10.244.2.7", "203.0.113.5", null, "not-an-ip"]) {
      const verdict = attributeSender(claimed(peer, { podName: "widget-a", namespace: "ops" }), directory);
      assert.ok(!verdict.ok, String(peer));
      assert.equal(verdict.reason, "unknown_sender");
    }
  });

  void test("before the node's pods are listed, an address found nowhere is told to retry, not refused", () => {
    const unlisted: SenderDirectory = { ...directory, listed: false };
    const verdict = attributeSender(claimed("10.244.2.7"), unlisted);
    assert.ok(!verdict.ok);
    assert.equal(verdict.reason, "senders_not_listed");
    assert.match(verdict.detail, /not been listed yet: sender 10\.244\.2\.7 may be one of them/);
    assert.ok(attributeSender(claimed("10.244.1.7"), unlisted).ok, "a pod already known is taken");
  });

  void test("loopback and node addresses: the node's processes, or a host-network pod they name", () => {
    for (const peer of ["127.0.0.1", "::1", "192.168.1.10"]) {
      const node = attributeSender(claimed(peer, { namespace: "ops" }), directory);
      assert.ok(node.ok, peer);
      assert.equal(node.process.sender, "node");
      assert.equal(node.process.namespace, null, "a namespace alone names no process");
      const hostPod = attributeSender(claimed(peer, { podName: "cilium-operator", namespace: "kube-system" }), directory);
      assert.ok(hostPod.ok, peer);
      assert.deepEqual([hostPod.process.sender, hostPod.process.podName, hostPod.process.podUid], ["pod", "cilium-operator", "uid-c"]);
      // The node's address cannot speak for a pod that has an address of its own.
      const spoof = attributeSender(claimed(peer, { podName: "widget-a", namespace: "ops" }), directory);
      assert.ok(!spoof.ok, peer);
      assert.equal(spoof.reason, "sender_mismatch");
      assert.match(spoof.detail, /names no host-network pod of this node/);
    }
  });

  void test("on the node's address a pod uid alone names a host-network pod as its name does, and must agree with it", () => {
    const byUid = attributeSender(claimed("192.168.1.10", { podUid: "uid-c" }), directory);
    assert.ok(byUid.ok);
    assert.deepEqual([byUid.process.sender, byUid.process.namespace, byUid.process.podName, byUid.process.podUid], ["pod", "kube-system", "cilium-operator", "uid-c"]);
    // Another pod's uid, or one with an address of its own, is no pod the node's address can speak for.
    for (const [resource, detail] of [
      [{ podUid: "uid-a" }, /resource k8s\.namespace\.name=null k8s\.pod\.name=null k8s\.pod\.uid="uid-a" names no host-network pod of this node; only those share the node's address 127\.0\.0\.1/],
      [{ podName: "cilium-operator", namespace: "kube-system", podUid: "uid-a" }, /resource k8s\.pod\.uid="uid-a"; only those share/],
      [{ podUid: "uid-c", namespace: "ops" }, /resource k8s\.namespace\.name="ops"; only those share/],
    ] as const) {
      const verdict = attributeSender(claimed("127.0.0.1", resource), directory);
      assert.ok(!verdict.ok, JSON.stringify(resource));
      assert.equal(verdict.reason, "sender_mismatch");
      assert.match(verdict.detail, detail);
    }
  });

  void test("pids match only inside the attested pod; the node's spans match only processes outside pods", () => {
    const a = attributeSender(claimed("10.244.1.7"), directory);
    const node = attributeSender(claimed("127.0.0.1"), directory);
    assert.ok(a.ok && node.ok);
    assert.equal(sentBy(a.process, { nsPid: 1, namespace: "ops", pod: "widget-a" }), true);
    assert.equal(sentBy(a.process, { nsPid: 1, namespace: "ops", pod: "widget-b" }), false, "pid 1 of another pod");
    assert.equal(sentBy(a.process, { nsPid: 1, namespace: null, pod: null }), false, "pid 1 outside pods");
    assert.equal(sentBy(a.process, { nsPid: 2, namespace: "ops", pod: "widget-a" }), false);
    assert.equal(sentBy({ ...a.process, pid: null }, { nsPid: 7, namespace: "ops", pod: "widget-a" }), true, "no pid: any process of the pod");
    assert.equal(sentBy(node.process, { nsPid: 1, namespace: null, pod: null }), true);
    assert.equal(sentBy(node.process, { nsPid: 1, namespace: "ops", pod: "widget-a" }), false);
    assert.equal(sentBy({ ...node.process, pid: null }, { nsPid: 1, namespace: null, pod: null }), false, "a node span without pid names no process");
  });
});
