import { test } from "node:test";
import assert from "node:assert/strict";
import { matchesLabelSelector, parseLabelSelector } from "../../../../../src/sources/targets/kubernetes/labelSelector.ts";
import { PodSchema, type Pod } from "../../../../../src/sources/targets/kubernetes/objects.ts";
import { controllerOf, isWatched, watchedContainers } from "../../../../../src/sources/targets/kubernetes/podSelection.ts";
import {
  endpointFromEnv,
  endpointFromServerUrl,
  endpointsFromSlices,
  normaliseEndpoints,
} from "../../../../../src/sources/targets/kubernetes/apiserverEndpoints.ts";

const ID_A = "a".repeat(64);
const ID_B = "b".repeat(64);
const none = { labelSelector: [] };

function pod(over: { labels?: Record<string, string>; annotations?: Record<string, string>; owners?: unknown[]; phase?: string } = {}): Pod {
  return PodSchema.parse({
    metadata: {
      name: "widget-operator-7d9f8c6b5-x2x4q",
      namespace: "ops",
      labels: over.labels ?? {},
      annotations: over.annotations ?? {},
      ownerReferences: over.owners ?? [],
    },
    spec: { nodeName: "node-a", containers: [{ name: "manager" }, { name: "proxy" }] },
    status: {
      phase: over.phase ?? "Running",
      containerStatuses: [
        { name: "manager", containerID: `containerd://${ID_A}` },
        { name: "proxy", containerID: `containerd://${ID_B}` },
      ],
    },
  });
}

void test("label selectors: equality, set, existence; errors quote the selector", () => {
  const sel = parseLabelSelector("app=widget, tier!=db,env in (prod, staging),!legacy,team");
  assert.equal(matchesLabelSelector(sel, { app: "widget", env: "prod", team: "x" }), true);
  assert.equal(matchesLabelSelector(sel, { app: "widget", env: "dev", team: "x" }), false);
  assert.equal(matchesLabelSelector(sel, { app: "widget", env: "prod", team: "x", legacy: "" }), false);
  assert.equal(matchesLabelSelector(sel, { app: "widget", env: "prod" }), false);
  assert.equal(matchesLabelSelector(parseLabelSelector("app.kubernetes.io/part-of==operators"), { "app.kubernetes.io/part-of": "operators" }), true);
  assert.equal(matchesLabelSelector(parseLabelSelector("x notin (a)"), {}), true);
  // Not configured selects nothing: an empty selector must not watch every pod.
  assert.equal(matchesLabelSelector(parseLabelSelector(""), { app: "widget" }), false);
  assert.throws(() => parseLabelSelector("app=wid get"), /label selector "app=wid get": invalid value "wid get"/);
  assert.throws(() => parseLabelSelector("-bad=1"), /invalid key "-bad"/);
});

void test("opt in by label, by annotation or by the configured selector; the ignore annotation wins", () => {
  assert.equal(isWatched(pod(), none), false);
  assert.equal(isWatched(pod({ labels: { "lostwrite.dev/watch": "true" } }), none), true);
  assert.equal(isWatched(pod({ annotations: { "lostwrite.dev/watch": "true" } }), none), true);
  assert.equal(isWatched(pod({ labels: { "lostwrite.dev/watch": "false" } }), none), false);
  assert.equal(isWatched(pod({ labels: { "control-plane": "controller-manager" } }), { labelSelector: parseLabelSelector("control-plane=controller-manager") }), true);
  assert.equal(
    isWatched(pod({ labels: { "lostwrite.dev/watch": "true" }, annotations: { "lostwrite.dev/ignore": "true" } }), none),
    false,
  );
});

void test("every container by default, or those the containers annotation names", () => {
  const all = watchedContainers(pod({ labels: { "lostwrite.dev/watch": "true" } }), none);
  assert.deepEqual(all.map((c) => [c.container, c.containerId]), [["manager", ID_A], ["proxy", ID_B]]);
  const some = watchedContainers(
    pod({ labels: { "lostwrite.dev/watch": "true" }, annotations: { "lostwrite.dev/containers": " manager ,other" } }),
    none,
  );
  assert.deepEqual(some.map((c) => c.container), ["manager"]);
  assert.deepEqual(watchedContainers(pod({ labels: { "lostwrite.dev/watch": "true" }, phase: "Succeeded" }), none), []);
});

void test("controller: the Deployment behind a ReplicaSet, other owners by name, none without owner", () => {
  const rs = [{ kind: "ReplicaSet", name: "widget-operator-7d9f8c6b5", controller: true }];
  assert.equal(controllerOf(pod({ owners: rs, labels: { "pod-template-hash": "7d9f8c6b5" } })), "widget-operator");
  // A bare ReplicaSet (no template hash label) is its own controller.
  assert.equal(controllerOf(pod({ owners: rs })), "widget-operator-7d9f8c6b5");
  assert.equal(controllerOf(pod({ owners: [{ kind: "StatefulSet", name: "db", controller: true }] })), "db");
  assert.equal(controllerOf(pod({ owners: [{ kind: "DaemonSet", name: "agent", controller: true }] })), "agent");
  assert.equal(controllerOf(pod({ owners: [{ kind: "Job", name: "migrate", controller: true }] })), "migrate");
  assert.equal(
    controllerOf(pod({ owners: [{ kind: "ConfigMap", name: "x" }, { kind: "StatefulSet", name: "db", controller: true }] })),
    "db",
  );
  assert.equal(controllerOf(pod()), "");
});

void test("apiserver endpoints from the environment, the kubeconfig server and EndpointSlices", () => {
  assert.deepEqual(endpointFromEnv({ KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" }), { host: "10.96.0.1", port: 443 });
  assert.deepEqual(endpointFromEnv({ KUBERNETES_SERVICE_HOST: "fd00::1", KUBERNETES_SERVICE_PORT: "443" }), { host: "fd00::1", port: 443 });
  assert.equal(endpointFromEnv({}), null);
  assert.equal(endpointFromEnv({ KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "x" }), null);
  assert.deepEqual(endpointFromServerUrl("https://127.0.0.1:6443"), { host: "127.0.0.1", port: 6443 });
  assert.deepEqual(endpointFromServerUrl("https://[::1]:6443"), { host: "::1", port: 6443 });
  assert.deepEqual(endpointFromServerUrl("https://api.example"), { host: "api.example", port: 443 });
  assert.equal(endpointFromServerUrl("not a url"), null);
  const slices = [
    { metadata: { name: "kubernetes", namespace: "default" }, addressType: "IPv4", endpoints: [{ addresses: ["172.18.0.2"] }, { addresses: ["172.18.0.3"] }], ports: [{ name: "https", port: 6443 }] },
    { metadata: { name: "kubernetes-fqdn", namespace: "default" }, addressType: "FQDN", endpoints: [{ addresses: ["api.example"] }], ports: [{ port: 6443 }] },
  ];
  assert.deepEqual(normaliseEndpoints([...endpointsFromSlices(slices), { host: "172.18.0.2", port: 6443 }]), [
    { host: "172.18.0.2", port: 6443 },
    { host: "172.18.0.3", port: 6443 },
  ]);
});
