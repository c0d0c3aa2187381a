// The shipped manifests: the base and every overlay render, alone and with
// each component of deploy/components, every object validates against the
// Kubernetes OpenAPI schemas (and the Prometheus Operator CRD schemas), each
// component changes exactly what it says and nothing else, and the privileges
// a cluster admin reads in the base are exactly the ones asserted here, so
// widening one is a deliberate change to this test. Which capability and
// mount the agent really needs is shown on the kernel by
// agent/test/e2e/deployedPrivileges.test.ts.
//
// The schemas come from the kubernetes-models packages, offline. They check
// types, required fields and enums but, like the published OpenAPI, allow
// unknown fields, so a misspelt key would pass them: that is why every
// security-relevant key is asserted below by name and value.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { isSeq, parseDocument, type Scalar } from "yaml";
import { DaemonSet } from "kubernetes-models/apps/v1";
import type { IDaemonSet } from "kubernetes-models/apps/v1/DaemonSet";
import type { IClusterRole } from "kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole";
import { assertValidSchemas, componentNames, type K8sObject, KUBECTL, overlayWith, renderKustomization, renderOverlay } from "../../deployManifests.ts";
import { repoPath } from "../../repoPath.ts";
import { CURRENT_MONITORING, DEBIAN_MONITORING, skipUnlessCI } from "../../e2e/support/tools.ts";

const ROOT = repoPath() + "/";

// Each is shown needed on the kernel by agent/test/e2e/deployedPrivileges.test.ts
// (the shape without it fails); that test's tables say why.
const CAPABILITIES = ["BPF", "PERFMON", "SYS_NICE", "SYS_PTRACE", "SYS_RESOURCE"];
// No /sys/fs/cgroup: containers are mapped from /proc/<pid>/cgroup. No
// /sys/kernel/btf: the container's own sysfs has it. No debugfs: tracefs is
// mounted where it is.
const HOST_PATHS = ["/proc", "/sys/kernel/tracing"];
// bpftrace creates the Go probe's uprobes by writing tracefs' uprobe_events.
const WRITABLE_HOST_PATHS = ["/sys/kernel/tracing"];

const skipReason = existsSync(KUBECTL) ? null : `${KUBECTL} not found: cannot render the kustomization`;

/** The base plus these components, as `components:` of an overlay. */
function renderWith(components: string[]): Promise<K8sObject[]> {
  return renderOverlay({ "kustomization.yaml": overlayWith(components) });
}

function validate(objects: K8sObject[], where: string): void {
  assertValidSchemas(objects, where);
  for (const o of objects) {
    if (o.kind !== "Namespace" && !o.kind.startsWith("Cluster")) {
      assert.equal(o.metadata.namespace, "lostwrite", `${where}: ${o.kind}/${o.metadata.name} namespace`);
    }
  }
}

/** The paths (a/b/0/c) at which two JSON values differ. */
function differences(a: unknown, b: unknown, at = ""): string[] {
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null || Array.isArray(a) !== Array.isArray(b)) {
    return JSON.stringify(a) === JSON.stringify(b) ? [] : [at];
  }
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...keys].flatMap((k) => differences((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], at ? `${at}/${k}` : k));
}

const objectKey = (o: K8sObject): string => `${o.kind}/${o.metadata.name}`;

/** What a component changes in the rendered base: objects added, and paths changed in the base's objects. */
async function componentEffect(component: string): Promise<{ added: K8sObject[]; changed: Record<string, string[]> }> {
  const base = new Map((await renderKustomization("deploy/base")).map((o) => [objectKey(o), o]));
  const withComponent = await renderWith([component]);
  validate(withComponent, `base + ${component}`);
  const added = withComponent.filter((o) => !base.has(objectKey(o)));
  const changed: Record<string, string[]> = {};
  for (const o of withComponent) {
    const before = base.get(objectKey(o));
    if (!before) continue;
    const paths = differences(before, o);
    if (paths.length) changed[objectKey(o)] = paths;
  }
  const kept = new Set(withComponent.map(objectKey));
  for (const key of base.keys()) assert.ok(kept.has(key), `${component} removes ${key}`);
  return { added, changed };
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

void test("the base renders, every object validates against its schema, and it needs no CRD", { skip: skipReason ?? false }, async () => {
  const objects = await renderKustomization("deploy/base");
  assert.deepEqual(objects.map(objectKey).sort(), [
    "ClusterRole/lostwrite",
    "ClusterRoleBinding/lostwrite",
    "DaemonSet/lostwrite",
    "Namespace/lostwrite",
    "Service/lostwrite-metrics",
    "Service/lostwrite-otlp",
    "ServiceAccount/lostwrite",
  ]);
  // Core API groups only: a bare cluster has every kind.
  for (const o of objects) assert.match(o.apiVersion, /^(v1|apps\/v1|rbac\.authorization\.k8s\.io\/v1)$/, objectKey(o));
  validate(objects, "deploy/base");
});

void test("every overlay renders and validates", { skip: skipReason ?? false }, async () => {
  for (const dir of await kustomizations()) validate(await renderKustomization(dir), dir);
});

void test("schema validation catches a wrong type (the check can fail)", () => {
  const bad = { metadata: { name: "x" }, spec: { selector: {}, template: { spec: { containers: [{ name: "a", securityContext: { capabilities: { add: "BPF" } } }] } } } };
  assert.throws(() => new DaemonSet(bad as never).validate(), /capabilities\/add must be array/);
});

void test("the DaemonSet asks for exactly the privileges it justifies", { skip: skipReason ?? false }, async () => {
  const ds = find<IDaemonSet>(await renderKustomization("deploy/base"), "DaemonSet");
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

  // Host paths: exactly these, each mounted read-only but those that must be written.
  const hostVolumes = new Map((pod.volumes ?? []).filter((v) => v.hostPath).map((v) => [v.name, v.hostPath?.path ?? ""]));
  assert.deepEqual([...hostVolumes.values()].sort(), HOST_PATHS);
  for (const m of c.volumeMounts ?? []) {
    const hostPath = hostVolumes.get(m.name);
    if (hostPath === undefined) continue;
    assert.equal(m.readOnly === true, !WRITABLE_HOST_PATHS.includes(hostPath), `${m.name} (${hostPath}) read-only: ${!WRITABLE_HOST_PATHS.includes(hostPath)}`);
  }
  const emptyDirs = (pod.volumes ?? []).filter((v) => v.emptyDir).map((v) => v.name);
  // Scratch space: /tmp (rendered programs), and where bcc finds the debug files naming the Go probe's points.
  assert.deepEqual((c.volumeMounts ?? []).filter((m) => emptyDirs.includes(m.name)).map((m) => m.mountPath), ["/tmp", "/usr/lib/debug/.build-id"], "scratch space: /tmp and the debug files' directory only");
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
  assert.equal(ports.get("otlp-http")?.containerPort, 4318);
  assert.equal(ports.get("otlp-grpc")?.containerPort, 4317);
  // No port on the node: the OpenTelemetry Collector's DaemonSet may hold
  // 4317/4318 there (deploy/components/host-port adds one, on a chosen port).
  for (const p of c.ports ?? []) assert.equal(p.hostPort, undefined, `port ${p.name} takes no hostPort in the base`);
  // GKE refuses system-node-critical without a quota: deploy/components/priority-class.
  assert.equal(pod.priorityClassName, undefined, "no priority class in the base");
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

void test("RBAC is read-only: list/watch on pods and endpointslices, nothing else", { skip: skipReason ?? false }, async () => {
  const objects = await renderKustomization("deploy/base");
  const role = find<IClusterRole>(objects, "ClusterRole");
  const grants = (role.rules ?? []).flatMap((r) => {
    assert.equal(r.nonResourceURLs, undefined);
    assert.equal(r.resourceNames, undefined);
    return (r.apiGroups ?? []).flatMap((g) => (r.resources ?? []).map((res) => `${g}/${res}:${[...r.verbs].sort().join(",")}`));
  });
  assert.deepEqual(grants.sort(), ["/pods:list,watch", "discovery.k8s.io/endpointslices:list,watch"]);
  assert.ok(!objects.some((o) => o.kind === "Role" || o.kind === "RoleBinding"), "no namespaced grants either");
  const rendered = JSON.stringify(objects.filter((o) => o.kind.includes("Role")));
  assert.doesNotMatch(rendered, /secrets|"\*"/);
});

void test("the namespace alone is Pod Security privileged", { skip: skipReason ?? false }, async () => {
  const ns = find<K8sObject>(await renderKustomization("deploy/base"), "Namespace");
  assert.equal(ns.metadata.name, "lostwrite");
  assert.equal(ns.metadata.labels?.["pod-security.kubernetes.io/enforce"], "privileged");
});

// The agent's namespace/pod/container labels name the watched operator: a
// scrape without honorLabels renames them exported_* and blames the agent pod.
void test("every scrape config honours the agent's namespace, pod and container labels", { skip: skipReason ?? false }, async () => {
  for (const dir of [...(await kustomizations()), "deploy/components/prometheus-operator"]) {
    const objects = dir.includes("/components/") ? await renderWith(["prometheus-operator"]) : await renderKustomization(dir);
    if (dir.includes("/components/")) assert.equal(objects.filter((o) => o.kind === "ServiceMonitor").length, 1, "the component ships one ServiceMonitor");
    const scrapes = objects.filter((o) => o.kind === "ServiceMonitor" || o.kind === "PodMonitor");
    if (dir === "deploy/base") assert.equal(scrapes.length, 0, "the base needs no Prometheus Operator CRD");
    for (const o of scrapes) {
      const { spec } = o as unknown as { spec: { endpoints?: { honorLabels?: boolean }[]; podMetricsEndpoints?: { honorLabels?: boolean }[] } };
      const endpoints = spec.endpoints ?? spec.podMetricsEndpoints ?? [];
      assert.ok(endpoints.length > 0, `${dir}: ${o.kind}/${o.metadata.name} has endpoints`);
      for (const e of endpoints) assert.equal(e.honorLabels, true, `${dir}: ${o.kind}/${o.metadata.name} honorLabels`);
    }
  }
});

void test("the kube-prometheus-stack overlay labels the ServiceMonitor and PrometheusRule for its release", { skip: skipReason ?? false }, async () => {
  const objects = await renderKustomization("deploy/overlays/kube-prometheus-stack");
  for (const kind of ["ServiceMonitor", "PrometheusRule"]) {
    assert.equal(find<K8sObject>(objects, kind).metadata.labels?.release, "kube-prometheus-stack", kind);
  }
  const monitor = find<{ spec: { endpoints: { port: string }[] } }>(objects, "ServiceMonitor");
  const service = objects.find((o) => o.metadata.name === "lostwrite-metrics") as unknown as { spec: { ports: { name: string }[] } };
  assert.deepEqual(monitor.spec.endpoints.map((e) => e.port), service.spec.ports.map((p) => p.name));
});

void test("the image runs the built JavaScript through the lostwrite command on Node 24 slim with a pinned bpftrace, and the page-out helper", async () => {
  const dockerfile = await readFile(`${ROOT}deploy/Dockerfile`, "utf8");
  const froms = [...dockerfile.matchAll(/^FROM (\S+)/gm)].map((m) => m[1]);
  // The helper is built with Go in a stage of its own; everything else, and the image, is Node 24 slim.
  assert.deepEqual(froms.filter((f) => !/^node:24-[a-z]+-slim\b/.test(f ?? "")), ["golang:1.26-bookworm"], froms.join(", "));
  assert.match(froms.at(-1) ?? "", /^node:24-[a-z]+-slim$/);
  // Where the agent looks for it (compilerPages.ts), from the sources the context lets in.
  assert.match(dockerfile, /^COPY --from=pageout \/src\/lostwrite-pageout \.\/agent\/pageout\/lostwrite-pageout$/m);
  assert.match(await readFile(`${ROOT}agent/src/sources/probe/compilerPages.ts`, "utf8"), /"agent\/pageout\/lostwrite-pageout"/);
  assert.match(await readFile(`${ROOT}.dockerignore`, "utf8"), /^!agent\/pageout\/\*\.go$/m);
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

/** What each component of deploy/components adds and changes, and nothing more. */
const COMPONENTS: Record<string, { added: string[]; changed: Record<string, string[]> }> = {
  "prometheus-operator": { added: ["PrometheusRule/lostwrite", "ServiceMonitor/lostwrite"], changed: {} },
  "network-policy": { added: ["NetworkPolicy/lostwrite-agent"], changed: {} },
  "host-port": { added: [], changed: { "DaemonSet/lostwrite": ["spec/template/spec/containers/0/ports/1/hostPort", "spec/template/spec/containers/0/ports/2/hostPort"] } },
  selinux: { added: [], changed: { "DaemonSet/lostwrite": ["spec/template/spec/securityContext/seLinuxOptions"] } },
  apparmor: { added: [], changed: { "DaemonSet/lostwrite": ["spec/template/spec/containers/0/securityContext/appArmorProfile"] } },
  "priority-class": { added: ["ResourceQuota/lostwrite-critical-pods"], changed: { "DaemonSet/lostwrite": ["spec/template/spec/priorityClassName"] } },
};

void test("every component is a kustomize Component, listed here and documented in docs/install.md", async () => {
  const install = await readFile(`${ROOT}docs/install.md`, "utf8");
  const names = componentNames();
  assert.deepEqual(names, Object.keys(COMPONENTS).sort());
  for (const name of names) {
    const kustomization = parseDocument(await readFile(`${ROOT}deploy/components/${name}/kustomization.yaml`, "utf8")).toJS() as { kind?: string };
    assert.equal(kustomization.kind, "Component", `deploy/components/${name}`);
    assert.ok(new RegExp(`^### \`${name}\`: `, "m").test(install), `docs/install.md has a section "### \`${name}\`: <when to use it>"`);
  }
});

void test("each component renders on the base, validates, and changes exactly what it is for", { skip: skipReason ?? false }, async () => {
  for (const [name, expected] of Object.entries(COMPONENTS)) {
    const { added, changed } = await componentEffect(name);
    assert.deepEqual(added.map(objectKey).sort(), expected.added, `${name}: objects added`);
    assert.deepEqual(changed, expected.changed, `${name}: paths changed in the base's objects`);
  }
});

void test("all components together render and validate", { skip: skipReason ?? false }, async () => {
  const objects = await renderWith(componentNames());
  validate(objects, "base + every component");
  for (const o of objects) assert.equal(o.metadata.labels?.["app.kubernetes.io/part-of"], "lostwrite", `${objectKey(o)} is labelled part of lostwrite`);
  const ds = find<IDaemonSet>(objects, "DaemonSet");
  assert.equal(ds.spec?.template.spec?.priorityClassName, "system-node-critical");
  assert.equal(ds.spec?.template.spec?.containers[0]?.securityContext?.appArmorProfile?.type, "Unconfined");
});

void test("spans reach the agent of the sender's node: a Local Service in the base, a hostPort with the component", { skip: skipReason ?? false }, async () => {
  const objects = await renderKustomization("deploy/base");
  const ds = find<IDaemonSet>(objects, "DaemonSet");
  const podLabels = ds.spec?.template.metadata?.labels ?? {};
  const containerPorts = new Map((ds.spec?.template.spec?.containers[0]?.ports ?? []).map((p) => [p.name, p.containerPort]));
  const otlp = objects.find((o) => o.metadata.name === "lostwrite-otlp") as unknown as {
    spec: { internalTrafficPolicy?: string; selector: Record<string, string>; ports: { port: number; targetPort: string }[] };
  };
  assert.equal(otlp.spec.internalTrafficPolicy, "Local", "a pod's spans go to its own node's agent only");
  for (const [k, v] of Object.entries(otlp.spec.selector)) assert.equal(podLabels[k], v, `selector ${k}`);
  for (const p of otlp.spec.ports) assert.equal(containerPorts.get(p.targetPort), p.port, `${p.targetPort} is a container port`);

  const withHostPort = find<IDaemonSet>(await renderWith(["host-port"]), "DaemonSet");
  const ports = withHostPort.spec?.template.spec?.containers[0]?.ports ?? [];
  assert.deepEqual(ports.filter((p) => p.hostPort !== undefined).map((p) => [p.name, p.containerPort, p.hostPort]), [["otlp-http", 4318, 4318], ["otlp-grpc", 4317, 4317]]);
});

/** docs/install.md's section on a component. */
async function installSection(name: string): Promise<string> {
  const text = await readFile(`${ROOT}docs/install.md`, "utf8");
  const start = text.indexOf(`### \`${name}\`: `);
  assert.ok(start >= 0, `docs/install.md section for ${name}`);
  const body = text.indexOf("\n", start) + 1;
  const end = text.slice(body).search(/^#{2,3} /m);
  return end < 0 ? text.slice(start) : text.slice(start, body + end);
}

void test("docs/install.md's overlay moves the hostPort, and only the hostPort", { skip: skipReason ?? false }, async () => {
  const block = /```yaml\n# deploy\/overlays\/mine\/kustomization\.yaml\n([\s\S]*?)```/.exec(await installSection("host-port"))?.[1];
  assert.ok(block !== undefined, "the host-port section has the overlay's kustomization.yaml");
  const chosen = Number(/hostPort: (\d+)/.exec(block)?.[1]);
  assert.ok(chosen > 0 && chosen !== 4318, "the example picks a port other than the Collector's");
  const objects = await renderOverlay({ "kustomization.yaml": block });
  const ds = find<IDaemonSet>(objects, "DaemonSet");
  const component = find<IDaemonSet>(await renderWith(["host-port"]), "DaemonSet");
  assert.deepEqual(differences(component, ds), ["spec/template/spec/containers/0/ports/1/hostPort", "spec/template/spec/containers/0/ports/2/hostPort"]);
  const otlp = ds.spec?.template.spec?.containers[0]?.ports?.find((p) => p.name === "otlp-http");
  assert.deepEqual([otlp?.containerPort, otlp?.hostPort], [4318, chosen], "the agent still listens on 4318 in its pod");
  const grpc = ds.spec?.template.spec?.containers[0]?.ports?.find((p) => p.name === "otlp-grpc");
  assert.ok(grpc?.hostPort !== undefined && grpc.hostPort !== 4317, "the example moves the gRPC node port off the Collector's too");
  assert.equal(grpc.containerPort, 4317, "the agent still listens on 4317 in its pod");
});

void test("the NetworkPolicy admits the metrics port from the monitoring namespace, the span port from pods, nothing else", { skip: skipReason ?? false }, async () => {
  const objects = await renderWith(["network-policy"]);
  const ds = find<IDaemonSet>(objects, "DaemonSet");
  const policy = find<{
    spec: {
      podSelector: { matchLabels: Record<string, string> };
      policyTypes: string[];
      ingress: { from: { namespaceSelector?: { matchLabels?: Record<string, string> }; podSelector?: unknown; ipBlock?: unknown }[]; ports: { port: string; protocol: string }[] }[];
    };
  }>(objects, "NetworkPolicy");
  const podLabels = ds.spec?.template.metadata?.labels ?? {};
  for (const [k, v] of Object.entries(policy.spec.podSelector.matchLabels)) assert.equal(podLabels[k], v, `podSelector ${k} selects the agent`);
  assert.deepEqual(policy.spec.policyTypes, ["Ingress"]);
  const containerPorts = (ds.spec?.template.spec?.containers[0]?.ports ?? []).map((p) => p.name ?? "");
  const admitted = policy.spec.ingress.flatMap((rule) => rule.ports.map((p) => p.port));
  // Every port the agent serves is admitted by name (a renamed or added port fails here), and only those.
  assert.deepEqual([...admitted].sort(), [...containerPorts].sort());
  for (const rule of policy.spec.ingress) {
    assert.ok(rule.from.length > 0, "no rule admits every source");
    for (const from of rule.from) assert.equal(from.ipBlock, undefined, "no address ranges: they differ per cluster");
    if (rule.ports.some((p) => p.port === "http")) {
      // Metrics and the /events feed (object names, trace ids): one namespace, not all.
      assert.deepEqual(rule.from.map((f) => f.namespaceSelector?.matchLabels), [{ "kubernetes.io/metadata.name": "monitoring" }]);
      assert.ok(rule.from.every((f) => f.podSelector !== undefined), "and only Prometheus's pods there");
    }
  }
});

void test("the priority class comes with the ResourceQuota GKE requires for it, in the agent's namespace", { skip: skipReason ?? false }, async () => {
  const objects = await renderWith(["priority-class"]);
  const priority = find<IDaemonSet>(objects, "DaemonSet").spec?.template.spec?.priorityClassName;
  const quota = find<{ metadata: { namespace: string }; spec: { hard: { pods: string }; scopeSelector: { matchExpressions: { scopeName: string; operator: string; values: string[] }[] } } }>(objects, "ResourceQuota");
  assert.equal(priority, "system-node-critical");
  assert.equal(quota.metadata.namespace, "lostwrite");
  assert.deepEqual(quota.spec.scopeSelector.matchExpressions, [{ scopeName: "PriorityClass", operator: "In", values: [priority] }]);
  assert.ok(Number(quota.spec.hard.pods) >= 15_000, "the quota never stops an agent (one per node)");
});

void test("SELinux runs the agent as spc_t; AppArmor unconfined through the Kubernetes >= 1.30 field", { skip: skipReason ?? false }, async () => {
  const selinux = find<IDaemonSet>(await renderWith(["selinux"]), "DaemonSet").spec?.template.spec;
  assert.deepEqual(selinux?.securityContext?.seLinuxOptions, { type: "spc_t" });
  const apparmor = find<IDaemonSet>(await renderWith(["apparmor"]), "DaemonSet").spec?.template.spec;
  assert.deepEqual(apparmor?.containers[0]?.securityContext?.appArmorProfile, { type: "Unconfined" });
  // Neither widens anything else the base grants.
  for (const pod of [selinux, apparmor]) {
    const sc = pod?.containers[0]?.securityContext;
    assert.notEqual(sc?.privileged, true);
    assert.deepEqual([...(sc?.capabilities?.add ?? [])].sort(), CAPABILITIES);
  }
});

const scrapeConfigChecks = [
  { generation: CURRENT_MONITORING, staticTarget: false },
  // Debian's Prometheus is built without Kubernetes discovery: its promtool
  // checks the job with a static target in its place, everything else as shipped.
  { generation: DEBIAN_MONITORING, staticTarget: true },
];

for (const { generation: { name, promtool }, staticTarget } of scrapeConfigChecks) void test(`the plain Prometheus scrape config keeps the agent's labels, adds the node, and promtool accepts it (${name})`, { skip: skipUnlessCI(promtool) }, async () => {
  const text = await readFile(`${ROOT}deploy/prometheus/scrape-config.yaml`, "utf8");
  const config = parseDocument(text).toJS() as {
    scrape_configs: { job_name: string; honor_labels?: boolean; kubernetes_sd_configs?: unknown[]; relabel_configs: { source_labels?: string[]; target_label?: string; regex?: string; action?: string }[] }[];
  };
  assert.equal(config.scrape_configs.length, 1);
  const job = config.scrape_configs[0]!;
  assert.equal(job.honor_labels, true, "honor_labels: the agent's namespace/pod/container name the operator");
  assert.ok(job.relabel_configs.some((r) => r.source_labels?.[0] === "__meta_kubernetes_pod_node_name" && r.target_label === "node"), "node label");
  const ds = find<IDaemonSet>(await renderKustomization("deploy/base"), "DaemonSet");
  const keep = job.relabel_configs.find((r) => r.action === "keep" && r.source_labels?.[0] === "__meta_kubernetes_pod_container_port_name");
  assert.equal(ds.spec?.template.spec?.containers[0]?.ports?.find((p) => p.containerPort === 9470)?.name, keep?.regex, "keeps the metrics port by its name");
  const dir = await mkdtemp(join(tmpdir(), "lostwrite-scrape-"));
  try {
    assert.ok(job.kubernetes_sd_configs?.length, "the job discovers the agent pods");
    const checked = staticTarget ? { scrape_configs: [{ ...job, kubernetes_sd_configs: undefined, static_configs: [{ targets: ["127.0.0.1:9470"] }] }] } : config;
    await writeFile(join(dir, "prometheus.yml"), JSON.stringify(checked));
    const result = await execa(promtool.path ?? assert.fail(promtool.reason), ["check", "config", join(dir, "prometheus.yml")], { reject: false, all: true });
    assert.equal(result.exitCode, 0, result.all);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

void test("every volume mount carries a comment saying why", async () => {
  const doc = parseDocument(await readFile(`${ROOT}deploy/base/daemonset.yaml`, "utf8"));
  const mounts = doc.getIn(["spec", "template", "spec", "containers", 0, "volumeMounts"], true);
  assert.ok(isSeq(mounts));
  mounts.items.forEach((item, i) => {
    const node = item as { commentBefore?: string | null; get(key: string): unknown };
    const comment = node.commentBefore ?? (i === 0 ? mounts.commentBefore : null) ?? "";
    assert.ok(comment.trim().length > 20, `volume mount ${String(node.get("name"))} has no justification comment`);
  });
});
