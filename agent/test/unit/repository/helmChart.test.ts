// The Helm chart (deploy/helm/lostwrite) renders the same objects as the
// kustomize base and components, value for component, so the privileges
// asserted on the base in deploy.test.ts hold for the chart too, and a change
// to one that is not made to the other fails here. Real helm v4 renders the
// chart (built from source by testbed/helm/helm.ts, cached after the first
// build); kubectl renders the kustomizations, as in deploy.test.ts.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { execa } from "execa";
import type { IDaemonSet } from "kubernetes-models/apps/v1/DaemonSet";
import { helmBinary } from "../../../../testbed/helm/helm.ts";
import { goUnavailable } from "../../../../testbed/goBuild.ts";
import { assertValidSchemas, type K8sObject, objectKey, overlayWith, parseObjects, renderKustomization, renderOverlay } from "../../deployManifests.ts";
import { repoPath } from "../../repoPath.ts";
import { locateTool, skipUnlessCI } from "../../e2e/support/tools.ts";

const CHART = repoPath("deploy/helm/lostwrite");
const kubectl = locateTool("kubectl", "install kubectl");
const go = goUnavailable();
const skip = skipUnlessCI(kubectl, { path: go ? null : "go", reason: go ?? "" });
// A first run builds helm from source: minutes (testbed/helm/helm.ts).
const SLOW = { skip, timeout: 1_200_000 };

/** The values that stand for each component of deploy/components (docs/install.md, "Helm"). */
const COMPONENT_VALUES: Record<string, string[]> = {
  "prometheus-operator": ["serviceMonitor.enabled=true", "prometheusRule.enabled=true"],
  "network-policy": ["networkPolicy.enabled=true"],
  "host-port": ["otlp.hostPort.enabled=true"],
  selinux: ["seLinuxOptions.type=spc_t"],
  apparmor: ["appArmorProfile.type=Unconfined"],
  "priority-class": ["priorityClassName=system-node-critical"],
};


async function helm(args: string[]): Promise<string> {
  const { stdout } = await execa(await helmBinary(), args, { cwd: repoPath() });
  return stdout;
}

/** `helm template` of the chart into namespace lostwrite, with these --set values. */
async function renderChart(values: string[]): Promise<K8sObject[]> {
  const set = values.flatMap((v) => ["--set", v]);
  return parseObjects(await helm(["template", "lostwrite", CHART, "--namespace", "lostwrite", ...set]));
}

/** Both renderings hold the same objects, field for field. */
function assertSameObjects(chart: K8sObject[], kustomize: K8sObject[], where: string): void {
  const byKey = (objects: K8sObject[]): Map<string, K8sObject> => new Map(objects.map((o) => [objectKey(o), o]));
  const fromChart = byKey(chart);
  const fromKustomize = byKey(kustomize);
  assert.deepEqual([...fromChart.keys()].sort(), [...fromKustomize.keys()].sort(), `${where}: objects`);
  for (const [key, o] of fromKustomize) assert.deepEqual(fromChart.get(key), o, `${where}: ${key}`);
}

function daemonSet(objects: K8sObject[]): IDaemonSet {
  const found = objects.filter((o) => o.kind === "DaemonSet");
  assert.equal(found.length, 1);
  return found[0] as IDaemonSet;
}

void test("helm lint accepts the chart", SLOW, async () => {
  const out = await helm(["lint", CHART, "--strict", ...Object.values(COMPONENT_VALUES).flat().flatMap((v) => ["--set", v])]);
  assert.match(out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
  await helm(["lint", CHART, "--strict"]);
});

void test("every component of deploy/components has the values that stand for it", () => {
  const components = readdirSync(repoPath("deploy/components"), { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name)
    .sort();
  assert.deepEqual(Object.keys(COMPONENT_VALUES).sort(), components);
});

void test("the chart's defaults (with namespace.create) render exactly deploy/base", SLOW, async () => {
  const chart = await renderChart(["namespace.create=true"]);
  assertValidSchemas(chart, "chart defaults");
  assertSameObjects(chart, await renderOverlay({ "kustomization.yaml": overlayWith([]) }), "defaults vs deploy/base");
});

void test("each component's values render exactly the base with that component", SLOW, async () => {
  for (const [component, values] of Object.entries(COMPONENT_VALUES)) {
    const chart = await renderChart(["namespace.create=true", ...values]);
    assertValidSchemas(chart, component);
    assertSameObjects(chart, await renderOverlay({ "kustomization.yaml": overlayWith([component]) }), component);
  }
});

void test("all components' values together render the base with every component", SLOW, async () => {
  const components = Object.keys(COMPONENT_VALUES);
  const chart = await renderChart(["namespace.create=true", ...Object.values(COMPONENT_VALUES).flat()]);
  assertSameObjects(chart, await renderOverlay({ "kustomization.yaml": overlayWith(components) }), "every component");
});

void test("the kube-prometheus-stack overlay is the Prometheus Operator objects labelled for that release", SLOW, async () => {
  const chart = await renderChart([
    "namespace.create=true",
    ...(COMPONENT_VALUES["prometheus-operator"] ?? []),
    "serviceMonitor.labels.release=kube-prometheus-stack",
    "prometheusRule.labels.release=kube-prometheus-stack",
  ]);
  assertSameObjects(chart, await renderKustomization(repoPath("deploy/overlays/kube-prometheus-stack")), "kube-prometheus-stack");
});

void test("helm install's namespace: no Namespace object by default, every object in the release's namespace", SLOW, async () => {
  const objects = parseObjects(await helm(["template", "lostwrite", CHART, "--namespace", "observability"]));
  assert.ok(!objects.some((o) => o.kind === "Namespace"), "helm install stores its release in the namespace: it must exist before");
  for (const o of objects) {
    if (!o.kind.startsWith("Cluster")) assert.equal(o.metadata.namespace, "observability", objectKey(o));
  }
  const binding = objects.find((o) => o.kind === "ClusterRoleBinding") as unknown as { subjects: { namespace: string }[] };
  assert.deepEqual(
    binding.subjects.map((s) => s.namespace),
    ["observability"],
  );
});

/** The paths (a/b/0/c) at which two JSON values differ. */
function differences(a: unknown, b: unknown, at = ""): string[] {
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null || Array.isArray(a) !== Array.isArray(b)) {
    return JSON.stringify(a) === JSON.stringify(b) ? [] : [at];
  }
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...keys].flatMap((k) => differences((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], at ? `${at}/${k}` : k));
}

void test("the values without a component change the DaemonSet where they say, and nowhere else", SLOW, async () => {
  const before = daemonSet(await renderChart([]));
  const values = [
    "image.repository=registry.example.com/lostwrite",
    "image.tag=0.2.0",
    "image.pullPolicy=Always",
    "imagePullSecrets[0].name=registry",
    "apiserver={10.0.0.1:6443,[fd00::1]:6443}",
    "watchLabelSelector=control-plane=controller-manager",
    "otlp.exportEndpoint=http://otel-collector.observability.svc:4318",
    "otlp.forward=http://tempo.observability.svc:4318/v1/traces",
    "otlp.forwarders={pod:observability/otel-agent*}",
    "extraArgs={--span-grace=30s}",
    "extraEnv[0].name=NODE_OPTIONS",
    "extraEnv[0].value=--max-old-space-size=256",
    "resources.limits.memory=1Gi",
    "nodeSelector.pool=operators",
    "tolerations[0].key=dedicated",
    "tolerations[0].operator=Exists",
  ];
  const after = daemonSet(await renderChart(values));
  assertValidSchemas([after as unknown as K8sObject], "every value set");
  const pod = after.spec?.template.spec;
  const c = pod?.containers[0];
  assert.equal(c?.image, "registry.example.com/lostwrite:0.2.0");
  assert.equal(c?.imagePullPolicy, "Always");
  assert.deepEqual(pod?.imagePullSecrets, [{ name: "registry" }]);
  assert.deepEqual(c?.args?.slice(6), [
    "--apiserver=10.0.0.1:6443",
    "--apiserver=[fd00::1]:6443",
    "--watch-label-selector=control-plane=controller-manager",
    "--otlp-forward=http://tempo.observability.svc:4318/v1/traces",
    "--otlp-forwarders=pod:observability/otel-agent*",
    "--span-grace=30s",
  ]);
  assert.deepEqual(c?.env?.slice(3), [
    { name: "OTEL_EXPORTER_OTLP_ENDPOINT", value: "http://otel-collector.observability.svc:4318" },
    { name: "NODE_OPTIONS", value: "--max-old-space-size=256" },
  ]);
  assert.equal(c?.resources?.limits?.memory, "1Gi");
  assert.equal(c?.resources?.requests?.memory, "256Mi", "a value set merges into the defaults");
  assert.deepEqual(pod?.nodeSelector, { "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", pool: "operators" });
  assert.deepEqual(pod?.tolerations, [{ key: "dedicated", operator: "Exists" }]);
  const prefix = "spec/template/spec";
  assert.deepEqual(differences(before, after).sort(), [
    `${prefix}/containers/0/args/10`,
    `${prefix}/containers/0/args/11`,
    `${prefix}/containers/0/args/6`,
    `${prefix}/containers/0/args/7`,
    `${prefix}/containers/0/args/8`,
    `${prefix}/containers/0/args/9`,
    `${prefix}/containers/0/env/3`,
    `${prefix}/containers/0/env/4`,
    `${prefix}/containers/0/image`,
    `${prefix}/containers/0/imagePullPolicy`,
    `${prefix}/containers/0/resources/limits/memory`,
    `${prefix}/imagePullSecrets`,
    `${prefix}/nodeSelector/pool`,
    `${prefix}/tolerations/0/key`,
  ]);
});

void test("prometheusRule.runbookBase replaces the base of every runbook URL and nothing else", SLOW, async () => {
  const rule = (objects: K8sObject[]): { spec: { groups: { rules: { annotations?: Record<string, string> }[] }[] } } =>
    objects.find((o) => o.kind === "PrometheusRule") as never;
  const before = rule(await renderChart(["prometheusRule.enabled=true"]));
  const after = rule(await renderChart(["prometheusRule.enabled=true", "prometheusRule.runbookBase=https://wiki.example.com/lostwrite/runbooks"]));
  const urls = after.spec.groups.flatMap((g) => g.rules.map((r) => r.annotations?.runbook_url ?? ""));
  assert.ok(urls.length > 0);
  for (const url of urls) assert.match(url, /^https:\/\/wiki\.example\.com\/lostwrite\/runbooks#lostwrite[a-z]+$/);
  assert.ok(differences(before, after).every((p) => p.endsWith("/annotations/runbook_url")));
});
