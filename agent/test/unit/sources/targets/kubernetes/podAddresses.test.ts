// The sender directory: which pod of this node an address belongs to, and
// which addresses are the node's, from the pod list as the apiserver sends it.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { PodSchema, type Pod } from "../../../../../src/sources/targets/kubernetes/objects.ts";
import { senderDirectoryOf } from "../../../../../src/sources/targets/kubernetes/podAddresses.ts";

function pod(name: string, status: Record<string, unknown>, spec: Record<string, unknown> = {}): Pod {
  return PodSchema.parse({
    metadata: { name, namespace: "ops", uid: `uid-${name}` },
    spec: { nodeName: "node-a", containers: [{ name: "manager" }], ...spec },
    status: { phase: "Running", hostIP: "192.168.1.10", ...status },
  });
}

void describe("pod addresses", { timeout: 10_000 }, () => {
  void test("a pod's own addresses name it, dual-stack included, whatever the spelling of the address", () => {
    const dir = senderDirectoryOf([
      pod("a", { podIP: "10.244.1.7", podIPs: [{ ip: "10.244.1.7" }, { ip: "fd00:10:244:1::7" }] }),
      pod("b", { podIP: "10.244.1.8" }),
    ]);
    assert.deepEqual(dir.podAt("10.244.1.7"), { namespace: "ops", pod: "a", uid: "uid-a" });
    assert.deepEqual(dir.podAt("fd00:10:244:1:0:0:0:7"), { namespace: "ops", pod: "a", uid: "uid-a" });
    assert.equal(dir.podAt("10.244.1.8")?.pod, "b", "podIP alone, as older apiservers send it");
    assert.equal(dir.podAt("10.244.1.9"), null);
    assert.equal(dir.isNodeAddress("192.168.1.10"), true, "every pod's hostIP is the node's");
    assert.equal(dir.isNodeAddress("10.244.1.7"), false);
    assert.equal(dir.listed, true);
    assert.equal(senderDirectoryOf([], false).listed, false, "before the first list succeeded");
  });

  void test("a host-network pod's address is the node's and names no pod; its name is known as host-network", () => {
    const dir = senderDirectoryOf([pod("cilium-operator", { podIP: "192.168.1.11", podIPs: [{ ip: "192.168.1.11" }] }, { hostNetwork: true })]);
    assert.equal(dir.podAt("192.168.1.11"), null);
    assert.equal(dir.isNodeAddress("192.168.1.11"), true);
    assert.deepEqual(dir.hostNetworkPod("ops", "cilium-operator"), { namespace: "ops", pod: "cilium-operator", uid: "uid-cilium-operator" });
    assert.equal(dir.hostNetworkPod("ops", "other"), null);
    assert.deepEqual(dir.hostNetworkPodByUid("uid-cilium-operator"), { namespace: "ops", pod: "cilium-operator", uid: "uid-cilium-operator" });
    assert.equal(dir.hostNetworkPodByUid("uid-other"), null);
  });

  void test("a finished pod gives its address up; two live pods on one address leave it to neither", () => {
    const dir = senderDirectoryOf([
      pod("done", { phase: "Succeeded", podIP: "10.244.1.20" }),
      pod("new", { podIP: "10.244.1.20" }),
      pod("x", { podIP: "10.244.1.30" }),
      pod("y", { podIP: "10.244.1.30" }),
    ]);
    assert.equal(dir.podAt("10.244.1.20")?.pod, "new");
    assert.equal(dir.podAt("10.244.1.30"), null);
  });

  void test("an address that is not an IP makes the pod invalid, naming the field", () => {
    const parsed = PodSchema.safeParse({
      metadata: { name: "a", namespace: "ops" },
      spec: { containers: [{ name: "manager" }] },
      status: { podIPs: [{ ip: "10.244.1.300" }] },
    });
    assert.equal(parsed.success, false);
    assert.deepEqual(parsed.error?.issues[0]?.path, ["status", "podIPs", 0, "ip"]);
    assert.match(parsed.error?.issues[0]?.message ?? "", /not an IP address/);
  });
});
