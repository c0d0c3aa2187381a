// The shipped manifests: they render, every object validates against the
// Kubernetes OpenAPI schemas (and the Prometheus Operator CRD schemas), and
// the privileges a cluster admin reads in them are exactly the ones asserted
// here, so widening one is a deliberate change to this test.
//
// The schemas come from the kubernetes-models packages, offline. They check
// types, required fields and enums but, like the published OpenAPI, allow
// unknown fields, so a misspelt key would pass them: that is why every
// security-relevant key is asserted below by name and value.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { readFile, readdir } from "node:fs/promises";
import { execa } from "execa";
import { isSeq, parseAllDocuments, parseDocument, type Scalar } from "yaml";
import { Namespace, Service, ServiceAccount } from "kubernetes-models/v1";
import { ClusterRole, ClusterRoleBinding } from "kubernetes-models/rbac.authorization.k8s.io/v1";
import { DaemonSet } from "kubernetes-models/apps/v1";
import { PrometheusRule, ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
import type { IDaemonSet } from "kubernetes-models/apps/v1/DaemonSet";
import type { IClusterRole } from "kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole";
import { repoPath } from "../../repoPath.ts";

const ROOT = repoPath() + "/";
const KUBECTL = "/usr/bin/kubectl";

// apiVersion/kind → the model that carries its schema.
const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  "v1/Namespace": Namespace,
  "v1/ServiceAccount": ServiceAccount,
  "v1/Service": Service,
  "rbac.authorization.k8s.io/v1/ClusterRole": ClusterRole,
  "rbac.authorization.k8s.io/v1/ClusterRoleBinding": ClusterRoleBinding,
  "apps/v1/DaemonSet": DaemonSet,
  "monitoring.coreos.com/v1/ServiceMonitor": ServiceMonitor,
  "monitoring.coreos.com/v1/PrometheusRule": PrometheusRule,
};

const CAPABILITIES = ["BPF", "DAC_READ_SEARCH", "PERFMON", "SYS_PTRACE", "SYS_RESOURCE"];
// No /sys/fs/cgroup: containers are mapped from /proc/<pid>/cgroup, and the
// deployed-shape e2e test runs the agent without that mount.
const HOST_PATHS = ["/proc", "/sys/kernel/btf", "/sys/kernel/debug", "/sys/kernel/tracing"];

interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
}

const skipReason = existsSync(KUBECTL) ? null : `${KUBECTL} not found: cannot render the kustomization`;

async function render(dir: string): Promise<K8sObject[]> {
  const { stdout } = await execa(KUBECTL, ["kustomize", dir], { cwd: ROOT });
  return parseAllDocuments(stdout).map((d) => d.toJS() as K8sObject);
}

/** deploy/base and every overlay under deploy/overlays. */
async function kustomizations(): Promise<string[]> {
  const overlays = await readdir(`${ROOT}deploy/overlays`, { withFileTypes: true });
  return ["deploy/base", ...overlays.filter((d) => d.isDirectory()).map((d) => `deploy/overlays/${d.name}`)];
}

function find<T>(objects: K8sObject[], kind: string): T {
  const found = objects.filter((o) => o.kind === kind);
  assert.equal(found.length, 1, `exactly one ${kind} expected`);
  return found[0] as T;
}

void test("kubectl is available where CI runs", { skip: process.env.CI === "true" ? false : (skipReason ?? false) }, () => {
  assert.equal(skipReason, null, skipReason ?? "");
});

void test("the base renders and every object validates against its schema", { skip: skipReason ?? false }, async () => {
  const objects = await render("deploy/base");
  assert.deepEqual(objects.map((o) => o.kind).sort(), [
    "ClusterRole",
    "ClusterRoleBinding",
    "DaemonSet",
    "Namespace",
    "PrometheusRule",
    "Service",
    "ServiceAccount",
    "ServiceMonitor",
  ]);
  for (const o of objects) {
    const Model = MODELS[`${o.apiVersion}/${o.kind}`];
    assert.ok(Model, `no schema for ${o.apiVersion} ${o.kind}`);
    assert.doesNotThrow(() => new Model(o as never).validate(), `${o.kind}/${o.metadata.name}`);
    if (o.kind !== "Namespace" && !o.kind.startsWith("Cluster")) {
      assert.equal(o.metadata.namespace, "lostwrite", `${o.kind}/${o.metadata.name} namespace`);
    }
  }
});

void test("schema validation catches a wrong type (the check can fail)", () => {
  const bad = { metadata: { name: "x" }, spec: { selector: {}, template: { spec: { containers: [{ name: "a", securityContext: { capabilities: { add: "BPF" } } }] } } } };
  assert.throws(() => new DaemonSet(bad as never).validate(), /capabilities\/add must be array/);
});

void test("the DaemonSet asks for exactly the privileges it justifies", { skip: skipReason ?? false }, async () => {
  const ds = find<IDaemonSet>(await render("deploy/base"), "DaemonSet");
  const pod = ds.spec?.template.spec;
  assert.ok(pod);
  assert.notEqual(pod.hostPID, true, "hostPID: the host's /proc is mounted read-only instead");
  assert.notEqual(pod.hostNetwork, true);
  assert.notEqual(pod.hostIPC, true);
  // Service links would inject LOSTWRITE_* variables (config.ts ignores them
  // with a warning; this keeps them out in the first place).
  assert.equal(pod.enableServiceLinks, false, "enableServiceLinks: false");
  assert.equal(pod.containers.length, 1);
  const c = pod.containers[0];
  assert.ok(c);
  const sc = c.securityContext ?? {};
  assert.notEqual(sc.privileged, true);
  assert.equal(sc.allowPrivilegeEscalation, false);
  assert.equal(sc.readOnlyRootFilesystem, true);
  assert.deepEqual(sc.capabilities?.drop, ["ALL"]);
  assert.deepEqual([...(sc.capabilities?.add ?? [])].sort(), CAPABILITIES);
  const seccomp = sc.seccompProfile?.type ?? pod.securityContext?.seccompProfile?.type;
  assert.equal(seccomp, "RuntimeDefault");

  // Only nodes whose syscalls the probes decode (x86_64).
  assert.deepEqual(pod.nodeSelector, { "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64" });

  // Host paths: exactly these, each mounted read-only.
  const hostVolumes = new Map((pod.volumes ?? []).filter((v) => v.hostPath).map((v) => [v.name, v.hostPath?.path ?? ""]));
  assert.deepEqual([...hostVolumes.values()].sort(), HOST_PATHS);
  for (const m of c.volumeMounts ?? []) {
    if (hostVolumes.has(m.name)) assert.equal(m.readOnly, true, `${m.name} must be mounted read-only`);
  }
  const procMount = (c.volumeMounts ?? []).find((m) => hostVolumes.get(m.name) === "/proc");
  assert.equal(
    c.env?.find((e) => e.name === "LOSTWRITE_PROC_ROOT")?.value,
    procMount?.mountPath,
    "the agent (and doctor run in the pod) read the mounted host /proc",
  );

  // Downward API, ports, probes, resources.
  const env = new Map((c.env ?? []).map((e) => [e.name, e.valueFrom?.fieldRef?.fieldPath]));
  assert.equal(env.get("NODE_NAME"), "spec.nodeName");
  assert.equal(env.get("HOST_IP"), "status.hostIP");
  assert.ok(c.args?.includes("--kubernetes"));
  assert.ok(c.args?.includes("--node-name=$(NODE_NAME)"));
  assert.ok(c.args?.includes("--listen=0.0.0.0:9470"));
  assert.ok(c.args?.includes("--otlp-listen=0.0.0.0:4318"));
  assert.ok(c.args?.includes("--otlp-grpc-listen=0.0.0.0:4317"));
  const ports = new Map((c.ports ?? []).map((p) => [p.name, p]));
  assert.equal(ports.get("http")?.containerPort, 9470);
  assert.equal(ports.get("http")?.hostPort, undefined, "metrics are not exposed on the node");
  assert.equal(ports.get("otlp-http")?.containerPort, 4318);
  assert.equal(ports.get("otlp-http")?.hostPort, 4318);
  assert.equal(ports.get("otlp-grpc")?.containerPort, 4317);
  assert.equal(ports.get("otlp-grpc")?.hostPort, 4317);
  assert.equal(c.readinessProbe?.httpGet?.path, "/readyz");
  assert.equal(c.readinessProbe?.httpGet?.port, "http");
  assert.equal(c.livenessProbe?.httpGet?.path, "/healthz");
  assert.equal(c.livenessProbe?.httpGet?.port, "http");
  for (const kind of ["requests", "limits"] as const) {
    assert.ok(c.resources?.[kind]?.cpu && c.resources[kind].memory, `resources.${kind} cpu and memory`);
  }
});

void test("every added capability carries a comment saying why", async () => {
  const doc = parseDocument(await readFile(`${ROOT}deploy/base/daemonset.yaml`, "utf8"));
  const add = doc.getIn(["spec", "template", "spec", "containers", 0, "securityContext", "capabilities", "add"], true);
  assert.ok(isSeq(add));
  assert.equal(add.items.length, CAPABILITIES.length);
  (add.items as Scalar[]).forEach((item, i) => {
    // The parser hangs the comment above the first item on the sequence itself.
    const comment = item.commentBefore ?? (i === 0 ? add.commentBefore : null) ?? "";
    assert.ok(comment.trim().length > 20, `capability ${String(item.value)} has no justification comment`);
  });
});

void test("RBAC is read-only: get/list/watch on pods and endpointslices, nothing else", { skip: skipReason ?? false }, async () => {
  const objects = await render("deploy/base");
  const role = find<IClusterRole>(objects, "ClusterRole");
  const grants = (role.rules ?? []).flatMap((r) => {
    assert.equal(r.nonResourceURLs, undefined);
    assert.equal(r.resourceNames, undefined);
    return (r.apiGroups ?? []).flatMap((g) => (r.resources ?? []).map((res) => `${g}/${res}:${[...r.verbs].sort().join(",")}`));
  });
  assert.deepEqual(grants.sort(), ["/pods:get,list,watch", "discovery.k8s.io/endpointslices:get,list,watch"]);
  assert.ok(!objects.some((o) => o.kind === "Role" || o.kind === "RoleBinding"), "no namespaced grants either");
  const rendered = JSON.stringify(objects.filter((o) => o.kind.includes("Role")));
  assert.doesNotMatch(rendered, /secrets|"\*"/);
});

void test("the namespace alone is Pod Security privileged", { skip: skipReason ?? false }, async () => {
  const ns = find<K8sObject>(await render("deploy/base"), "Namespace");
  assert.equal(ns.metadata.name, "lostwrite");
  assert.equal(ns.metadata.labels?.["pod-security.kubernetes.io/enforce"], "privileged");
});

// The agent's namespace/pod/container labels name the watched operator: a
// scrape without honorLabels renames them exported_* and blames the agent pod.
void test("every scrape config honours the agent's namespace, pod and container labels", { skip: skipReason ?? false }, async () => {
  for (const dir of await kustomizations()) {
    const objects = await render(dir);
    const scrapes = objects.filter((o) => o.kind === "ServiceMonitor" || o.kind === "PodMonitor");
    if (dir === "deploy/base") assert.equal(scrapes.length, 1, "the base ships one ServiceMonitor");
    for (const o of scrapes) {
      const { spec } = o as unknown as { spec: { endpoints?: { honorLabels?: boolean }[]; podMetricsEndpoints?: { honorLabels?: boolean }[] } };
      const endpoints = spec.endpoints ?? spec.podMetricsEndpoints ?? [];
      assert.ok(endpoints.length > 0, `${dir}: ${o.kind}/${o.metadata.name} has endpoints`);
      for (const e of endpoints) assert.equal(e.honorLabels, true, `${dir}: ${o.kind}/${o.metadata.name} honorLabels`);
    }
  }
});

void test("the kube-prometheus-stack overlay labels the ServiceMonitor and PrometheusRule for its release", { skip: skipReason ?? false }, async () => {
  const objects = await render("deploy/overlays/kube-prometheus-stack");
  for (const kind of ["ServiceMonitor", "PrometheusRule"]) {
    assert.equal(find<K8sObject>(objects, kind).metadata.labels?.release, "kube-prometheus-stack", kind);
  }
  const monitor = find<{ spec: { endpoints: { port: string }[] } }>(objects, "ServiceMonitor");
  const service = find<{ spec: { ports: { name: string }[] } }>(objects, "Service");
  assert.deepEqual(monitor.spec.endpoints.map((e) => e.port), service.spec.ports.map((p) => p.name));
});

void test("the image runs the built JavaScript through the lostwrite command on Node 24 slim with a pinned bpftrace", async () => {
  const dockerfile = await readFile(`${ROOT}deploy/Dockerfile`, "utf8");
  const froms = [...dockerfile.matchAll(/^FROM (\S+)/gm)].map((m) => m[1]);
  assert.ok(froms.length > 0 && froms.every((f) => /^node:24-[a-z]+-slim\b/.test(f ?? "")), froms.join(", "));
  assert.match(dockerfile, /BPFTRACE_VERSION=\d+\.\d+\.\d+-\d+/);
  assert.match(dockerfile, /"bpftrace=\$\{BPFTRACE_VERSION\}"/);
  assert.match(dockerfile, /npm ci --omit=dev/);
  // The entrypoint is the documented `lostwrite` command, which runs dist/ in the image.
  assert.match(dockerfile, /^COPY agent\/bin \.\/agent\/bin$/m);
  assert.match(dockerfile, /ln -s \/app\/agent\/bin\/lostwrite\.js \/usr\/local\/bin\/lostwrite\b/);
  assert.match(dockerfile, /^WORKDIR \/app$/m);
  assert.match(dockerfile, /ENTRYPOINT \["lostwrite"\]/);
  assert.match(await readFile(`${ROOT}agent/bin/lostwrite.js`, "utf8"), /"\.\.\/\.\.\/dist\/agent\/src\/cli\.js"/);
  assert.match(await readFile(`${ROOT}.dockerignore`, "utf8"), /^!agent\/bin\/\*\*$/m);
  assert.match(dockerfile, /CMD \["agent", "--kubernetes"\]/);
  assert.match(await readFile(`${ROOT}tsconfig.build.json`, "utf8"), /"outDir": "dist"/);
});
