// Discovery against a small in-test HTTP server speaking the list and watch
// parts of the Kubernetes API for pods and EndpointSlices, and a proc root
// laid out in a temporary directory.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AgentMetrics } from "../../../../../src/telemetry/metrics.ts";
import type { Logger } from "../../../../../src/telemetry/log.ts";
import { KubernetesTargets, watchErrorReason, type KubeTarget } from "../../../../../src/sources/targets/kubernetes/kubernetesTargets.ts";
import type { ApiserverEndpoint } from "../../../../../src/sources/targets/kubernetes/apiserverEndpoints.ts";

const MANAGER = "1".repeat(64);
const SIDECAR = "2".repeat(64);
const OTHER = "3".repeat(64);

type Obj = { metadata: { name: string; namespace: string; resourceVersion?: string } & Record<string, unknown> } & Record<string, unknown>;

/** Pods and EndpointSlices in memory with list and watch, and a log of every request. */
class FakeApiserver {
  readonly requests: string[] = [];
  #rv = 1;
  readonly #stores = new Map<string, Map<string, unknown>>([
    ["/api/v1/pods", new Map()],
    ["/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", new Map()],
  ]);
  readonly #watchers = new Map<string, Set<ServerResponse>>();
  /** Paths answered 403, as an apiserver answers a ServiceAccount its ClusterRole does not cover. */
  readonly forbidden = new Set<string>();
  readonly #server = createServer((req, res) => this.#handle(req, res));

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.#server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    for (const set of this.#watchers.values()) for (const res of set) res.destroy();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  put(path: string, obj: Obj | Record<string, unknown>, type: "ADDED" | "MODIFIED" = "ADDED"): void {
    const rv = String(++this.#rv);
    const meta = (obj as Obj).metadata as Obj["metadata"] | undefined;
    if (meta) meta.resourceVersion = rv;
    const key = meta ? `${meta.namespace}/${meta.name}` : `malformed-${rv}`;
    this.#stores.get(path)?.set(key, obj);
    this.#send(path, { type, object: obj });
  }

  delete(path: string, obj: Obj): void {
    this.#stores.get(path)?.delete(`${obj.metadata.namespace}/${obj.metadata.name}`);
    obj.metadata.resourceVersion = String(++this.#rv);
    this.#send(path, { type: "DELETED", object: obj });
  }

  #send(path: string, event: unknown): void {
    for (const res of this.#watchers.get(path) ?? []) res.write(JSON.stringify(event) + "\n");
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    this.requests.push(req.url ?? "");
    const url = new URL(req.url ?? "/", "http://x");
    const store = this.#stores.get(url.pathname);
    if (!store) {
      res.writeHead(404).end();
      return;
    }
    if (this.forbidden.has(url.pathname)) {
      res.writeHead(403, { "content-type": "application/json" });
      res.end(JSON.stringify({ kind: "Status", apiVersion: "v1", status: "Failure", reason: "Forbidden", code: 403, message: `forbidden: ${url.pathname}` }));
      return;
    }
    if (url.searchParams.get("watch") === "true") {
      res.writeHead(200, { "content-type": "application/json" });
      res.flushHeaders();
      let set = this.#watchers.get(url.pathname);
      if (!set) this.#watchers.set(url.pathname, (set = new Set()));
      set.add(res);
      res.on("close", () => set.delete(res));
      return;
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ kind: "List", apiVersion: "v1", metadata: { resourceVersion: String(this.#rv) }, items: [...store.values()] }));
  }
}

const PODS = "/api/v1/pods";
const SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";

function operatorPod(name: string, containers: [string, string][], extra: { annotations?: Record<string, string> } = {}): Obj {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: "ops",
      labels: { "lostwrite.dev/watch": "true", "pod-template-hash": "7d9f8c6b5" },
      annotations: extra.annotations ?? {},
      ownerReferences: [{ apiVersion: "apps/v1", kind: "ReplicaSet", name: "widget-operator-7d9f8c6b5", uid: "u1", controller: true }],
    },
    spec: { nodeName: "node-a", containers: containers.map(([n]) => ({ name: n })) },
    status: { phase: "Running", containerStatuses: containers.map(([n, id]) => ({ name: n, containerID: `containerd://${id}`, ready: true })) },
  };
}

function slice(addresses: string[]): Obj {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: { name: "kubernetes", namespace: "default", labels: { "kubernetes.io/service-name": "kubernetes" } },
    addressType: "IPv4",
    endpoints: addresses.map((a) => ({ addresses: [a], conditions: { ready: true } })),
    ports: [{ name: "https", port: 6443, protocol: "TCP" }],
  };
}

async function addProcess(procRoot: string, pid: number, comm: string, containerId: string | null): Promise<void> {
  const dir = join(procRoot, String(pid));
  await mkdir(dir, { recursive: true });
  const path = containerId
    ? `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu1.slice/cri-containerd-${containerId}.scope`
    : "/system.slice/containerd.service";
  await writeFile(join(dir, "cgroup"), `0::${path}\n`);
  await writeFile(join(dir, "comm"), comm + "\n");
}

function silentLogger(lines: string[]): Logger {
  const push = (msg: string): void => void lines.push(msg);
  return { info: push, warn: push, error: push, warnRateLimited: (_k, msg) => push(msg), warnOnce: (_k, msg) => push(msg) };
}

/** Resolves with the first emitted value that satisfies `ok`, or rejects after `ms`. */
function nextMatching<T>(subscribe: (cb: (v: T) => void) => () => void, ok: (v: T) => boolean, ms: number, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`timed out after ${ms} ms waiting for ${what}`));
    }, ms);
    const off = subscribe((v) => {
      if (!ok(v)) return;
      clearTimeout(timer);
      off();
      resolve(v);
    });
  });
}

const summary = (targets: KubeTarget[]): string[] =>
  targets.map((t) => `${t.pid} ${t.identity.process} ${t.identity.namespace}/${t.identity.pod}/${t.identity.container} ${t.identity.controller}`);

async function setup(t: TestContext, opts: { labelSelector?: string } = {}) {
  const api = new FakeApiserver();
  const server = await api.listen();
  const procRoot = await mkdtemp(join(tmpdir(), "lostwrite-proc-"));
  const metrics = new AgentMetrics();
  const logLines: string[] = [];
  const targets = new KubernetesTargets({
    nodeName: "node-a",
    access: { server, source: "test" },
    procRoot,
    watchLabelSelector: opts.labelSelector ?? "",
    env: { KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" },
    metrics,
    log: silentLogger(logLines),
  });
  t.after(async () => {
    await targets.stop();
    await api.close();
    await rm(procRoot, { recursive: true, force: true });
  });
  return { api, procRoot, targets, metrics, logLines, server };
}

void test("finds the processes of a watched pod's containers and labels them from the pod", async (t) => {
  const { api, procRoot, targets } = await setup(t);
  await addProcess(procRoot, 4242, "manager", MANAGER);
  await addProcess(procRoot, 4300, "envoy", SIDECAR);
  await addProcess(procRoot, 5000, "other", OTHER);
  await addProcess(procRoot, 900, "containerd", null);
  api.put(PODS, operatorPod("widget-operator-7d9f8c6b5-x2x4q", [["manager", MANAGER], ["proxy", SIDECAR]]));
  await targets.start();
  assert.deepEqual(summary(targets.targets()), [
    "4242 manager ops/widget-operator-7d9f8c6b5-x2x4q/manager widget-operator",
    "4300 envoy ops/widget-operator-7d9f8c6b5-x2x4q/proxy widget-operator",
  ]);
  assert.equal(targets.targets()[0]?.identity.pid, 4242);
  assert.equal(targets.targets()[0]?.identity.tid, 4242);
});

void test("every pod request is scoped to this node", async (t) => {
  const { api, targets } = await setup(t);
  await targets.start();
  const podRequests = api.requests.filter((u) => u.startsWith(PODS));
  assert.ok(podRequests.length >= 2, `list and watch expected, got ${podRequests.join(", ")}`);
  for (const u of podRequests) {
    assert.equal(new URL(u, "http://x").searchParams.get("fieldSelector"), "spec.nodeName=node-a", u);
  }
});

void test("a process that starts later in a watched container is found within 2 s; a deleted pod is dropped", async (t) => {
  const { api, procRoot, targets, metrics } = await setup(t);
  const pod = operatorPod("widget-operator-7d9f8c6b5-x2x4q", [["manager", MANAGER]]);
  api.put(PODS, pod);
  await targets.start();
  assert.deepEqual(targets.targets(), []);
  const started = Date.now();
  const found = nextMatching<KubeTarget[]>((cb) => targets.onTargets(cb), (v) => v.length === 1, 2500, "the new process");
  await addProcess(procRoot, 4242, "manager", MANAGER);
  assert.deepEqual(summary(await found), ["4242 manager ops/widget-operator-7d9f8c6b5-x2x4q/manager widget-operator"]);
  assert.ok(Date.now() - started <= 2200, `found after ${Date.now() - started} ms`);
  assert.match(await metrics.text(), /lostwrite_targets\{source="kubernetes"\} 1/);

  const gone = nextMatching<KubeTarget[]>((cb) => targets.onTargets(cb), (v) => v.length === 0, 2500, "the pod to be dropped");
  api.delete(PODS, pod);
  assert.deepEqual(await gone, []);
  assert.match(await metrics.text(), /lostwrite_targets\{source="kubernetes"\} 0/);
});

void test("opt-out, container list and label selector are honoured as pods change", async (t) => {
  const { api, procRoot, targets } = await setup(t, { labelSelector: "control-plane=controller-manager" });
  await addProcess(procRoot, 4242, "manager", MANAGER);
  await addProcess(procRoot, 4300, "envoy", SIDECAR);
  await addProcess(procRoot, 5000, "kubebuilder", OTHER);
  const pod = operatorPod("widget-operator-7d9f8c6b5-x2x4q", [["manager", MANAGER], ["proxy", SIDECAR]], {
    annotations: { "lostwrite.dev/containers": "manager" },
  });
  api.put(PODS, pod);
  const bySelector: Obj = {
    metadata: { name: "gadget-controller-0", namespace: "gadgets", labels: { "control-plane": "controller-manager" }, ownerReferences: [{ kind: "StatefulSet", name: "gadget-controller", controller: true }] },
    spec: { nodeName: "node-a", containers: [{ name: "manager" }] },
    status: { phase: "Running", containerStatuses: [{ name: "manager", containerID: `cri-o://${OTHER}` }] },
  };
  api.put(PODS, bySelector);
  await targets.start();
  assert.deepEqual(summary(targets.targets()), [
    "4242 manager ops/widget-operator-7d9f8c6b5-x2x4q/manager widget-operator",
    "5000 kubebuilder gadgets/gadget-controller-0/manager gadget-controller",
  ]);
  // Waits for the ignored pod's target to go, not for any one-target state: a
  // change from the second (label selector) watch can come in between.
  const ignored = nextMatching<KubeTarget[]>((cb) => targets.onTargets(cb), (v) => !v.some((t) => t.pid === 4242), 2500, "the ignored pod to be dropped");
  pod.metadata.annotations = { "lostwrite.dev/ignore": "true" };
  api.put(PODS, pod, "MODIFIED");
  assert.deepEqual(summary(await ignored), ["5000 kubebuilder gadgets/gadget-controller-0/manager gadget-controller"]);
});

void test("malformed pods in the list and on the watch are counted, logged and skipped", async (t) => {
  const { api, procRoot, targets, metrics, logLines } = await setup(t);
  await addProcess(procRoot, 4242, "manager", MANAGER);
  await addProcess(procRoot, 4300, "envoy", SIDECAR);
  api.put(PODS, { metadata: { name: "broken", namespace: "ops" }, spec: { containers: "nope" } });
  api.put(PODS, operatorPod("a", [["manager", MANAGER]]));
  await targets.start();
  assert.deepEqual(summary(targets.targets()), ["4242 manager ops/a/manager widget-operator"]);
  const more = nextMatching<KubeTarget[]>((cb) => targets.onTargets(cb), (v) => v.length === 2, 2500, "the valid pod after malformed ones");
  api.put(PODS, { kind: "Pod" }); // no metadata at all: would throw inside the watch cache
  api.put(PODS, { metadata: { name: "b", namespace: "ops" }, spec: null });
  api.put(PODS, operatorPod("b", [["manager", SIDECAR]]));
  assert.equal((await more).length, 2);
  assert.match(await metrics.text(), /lostwrite_events_dropped_total\{stage="kubernetes",reason="invalid"\} 3/);
  assert.ok(logLines.includes("skipped a malformed Pod"), logLines.join("\n"));
});

void test("apiserver endpoints: the Service address plus every EndpointSlice address, following changes", async (t) => {
  const { api, targets } = await setup(t);
  api.put(SLICES, slice(["172.18.0.2"]));
  await targets.start();
  const key = (es: ApiserverEndpoint[]): string[] => es.map((e) => `${e.host}:${e.port}`);
  // The fake kubeconfig server is 127.0.0.1:<port>, which counts as an endpoint too.
  const initial = key(targets.apiservers()).filter((e) => !e.startsWith("127.0.0.1:"));
  assert.deepEqual(initial, ["10.96.0.1:443", "172.18.0.2:6443"]);
  const changed = nextMatching<ApiserverEndpoint[]>((cb) => targets.onApiservers(cb), () => true, 2000, "the endpoint change");
  api.put(SLICES, slice(["172.18.0.3", "172.18.0.4"]), "MODIFIED");
  assert.deepEqual(key(await changed).filter((e) => !e.startsWith("127.0.0.1:")), ["10.96.0.1:443", "172.18.0.3:6443", "172.18.0.4:6443"]);
  const sliceRequests = api.requests.filter((u) => u.startsWith(SLICES));
  for (const u of sliceRequests) {
    assert.equal(new URL(u, "http://x").searchParams.get("labelSelector"), "kubernetes.io/service-name=kubernetes", u);
  }
});

void test("span senders: the pods' addresses as listed and watched; before the first list, nothing is known for sure", async (t) => {
  const { api, targets } = await setup(t);
  assert.equal(targets.senders().listed, false);
  const pod = operatorPod("widget-operator-7d9f8c6b5-x2x4q", [["manager", MANAGER]]);
  pod.status = { ...(pod.status as object), podIP: "10.244.1.7", podIPs: [{ ip: "10.244.1.7" }], hostIP: "192.168.1.10" };
  api.put(PODS, pod);
  await targets.start();
  assert.equal(targets.senders().listed, true);
  assert.equal(targets.senders().podAt("10.244.1.7")?.pod, "widget-operator-7d9f8c6b5-x2x4q");
  assert.equal(targets.senders().isNodeAddress("192.168.1.10"), true);
  // A new pod on the watch is known at once.
  const other = operatorPod("other-operator-5c7d8f9b4-k2v9x", [["manager", OTHER]]);
  other.status = { ...(other.status as object), podIP: "10.244.1.8" };
  api.put(PODS, other);
  const deadline = Date.now() + 2000;
  while (targets.senders().podAt("10.244.1.8") === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  assert.equal(targets.senders().podAt("10.244.1.8")?.pod, "other-operator-5c7d8f9b4-k2v9x");
});

void test("an invalid node name is refused with the value quoted", () => {
  assert.throws(
    () => new KubernetesTargets({ nodeName: "", access: { server: "http://127.0.0.1:1", source: "test" }, metrics: new AgentMetrics(), log: silentLogger([]) }),
    /nodeName "" is not a valid node name/,
  );
});

void test("a list or watch the ServiceAccount may not make is counted by resource and reason, not only logged", async (t) => {
  const { api, targets, metrics } = await setup(t);
  api.forbidden.add(SLICES);
  await targets.start().catch(() => undefined);
  const forbidden = async (): Promise<number> =>
    (await metrics.registry.getSingleMetric("lostwrite_kubernetes_watch_errors_total")!.get()).values.find(
      (v) => v.labels.resource === "endpointslices" && v.labels.reason === "forbidden",
    )?.value ?? 0;
  const deadline = Date.now() + 5000;
  while ((await forbidden()) === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  assert.ok((await forbidden()) >= 1, "the forbidden EndpointSlice list is counted as forbidden");
});

void test("watch errors are told apart by HTTP status, else by message", () => {
  assert.equal(watchErrorReason({ code: 403, body: "{}" }), "forbidden");
  assert.equal(watchErrorReason({ statusCode: 401 }), "unauthorized");
  assert.equal(watchErrorReason(new Error("Forbidden")), "forbidden");
  assert.equal(watchErrorReason(new Error("Unauthorized")), "unauthorized");
  assert.equal(watchErrorReason(new Error("connect ECONNREFUSED 127.0.0.1:6443")), "other");
  // A status wins over words in the message.
  assert.equal(watchErrorReason({ code: 500, message: "forbidden fruit" }), "other");
});
