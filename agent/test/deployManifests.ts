// Every form in which deploy/ reaches a cluster, for the tests that check it:
// the kustomize base, the base with each component (as a user's overlay adds
// it) and with all of them, each overlay under deploy/overlays, and the Helm
// chart with its defaults, with the values that stand for each component, and
// with all of those; parsed into objects, each checkable against the
// Kubernetes schema of its kind.
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { parseAllDocuments } from "yaml";
import { Namespace, ResourceQuota, Service, ServiceAccount } from "kubernetes-models/v1";
import { NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1";
import { ClusterRole, ClusterRoleBinding } from "kubernetes-models/rbac.authorization.k8s.io/v1";
import { DaemonSet } from "kubernetes-models/apps/v1";
import { PrometheusRule, ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
import { repoPath } from "./repoPath.ts";

/** kubectl renders kustomizations (`kubectl kustomize`): a real client-go build. */
export const KUBECTL = "/usr/bin/kubectl";

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

// apiVersion/kind → the model that carries its schema.
const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  "v1/Namespace": Namespace,
  "v1/ServiceAccount": ServiceAccount,
  "v1/Service": Service,
  "v1/ResourceQuota": ResourceQuota,
  "networking.k8s.io/v1/NetworkPolicy": NetworkPolicy,
  "rbac.authorization.k8s.io/v1/ClusterRole": ClusterRole,
  "rbac.authorization.k8s.io/v1/ClusterRoleBinding": ClusterRoleBinding,
  "apps/v1/DaemonSet": DaemonSet,
  "monitoring.coreos.com/v1/ServiceMonitor": ServiceMonitor,
  "monitoring.coreos.com/v1/PrometheusRule": PrometheusRule,
};

export const objectKey = (o: K8sObject): string => `${o.kind}/${o.metadata.name}`;

/** A multi-document YAML stream's objects (empty documents dropped). */
export function parseObjects(text: string): K8sObject[] {
  return parseAllDocuments(text)
    .map((d) => d.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => o !== null);
}

/** Every object valid against its kind's schema; a kind without one fails, naming it. */
export function assertValidSchemas(objects: K8sObject[], where: string): void {
  for (const o of objects) {
    const Model = MODELS[`${o.apiVersion}/${o.kind}`];
    assert.ok(Model, `${where}: no schema for ${o.apiVersion} ${o.kind}`);
    assert.doesNotThrow(() => new Model(o as never).validate(), `${where}: ${objectKey(o)}`);
  }
}

/** `kubectl kustomize DIR`: the YAML, as `kubectl apply -f -` is given it. */
export async function kustomize(dir: string): Promise<string> {
  return (await execa(KUBECTL, ["kustomize", dir], { cwd: repoPath() })).stdout;
}

/** `kubectl kustomize DIR`, as objects. */
export async function renderKustomization(dir: string): Promise<K8sObject[]> {
  return parseObjects(await kustomize(dir));
}

/**
 * Renders an overlay as a user writes one, at deploy/overlays/<name> of a
 * copy of the tree whose base and components are the real ones.
 */
export async function kustomizeOverlay(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "lostwrite-overlay-"));
  try {
    await mkdir(join(dir, "deploy/overlays/mine"), { recursive: true });
    await symlink(repoPath("deploy/base"), join(dir, "deploy/base"));
    await symlink(repoPath("deploy/components"), join(dir, "deploy/components"));
    for (const [name, text] of Object.entries(files)) await writeFile(join(dir, "deploy/overlays/mine", name), text);
    return await kustomize(join(dir, "deploy/overlays/mine"));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** kustomizeOverlay, as objects. */
export async function renderOverlay(files: Record<string, string>): Promise<K8sObject[]> {
  return parseObjects(await kustomizeOverlay(files));
}

/** An overlay's kustomization.yaml: the base plus these components, then `extra`. */
export function overlayWith(components: string[], extra = ""): string {
  return `resources:\n  - ../../base\ncomponents:\n${components.map((c) => `  - ../../components/${c}\n`).join("")}${extra}`;
}

/** The directories under deploy/`parent` (components, overlays), sorted. */
function directoriesOf(parent: string): string[] {
  return readdirSync(repoPath("deploy", parent), { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name)
    .sort();
}

/** The component directories under deploy/components, sorted. */
export const componentNames = (): string[] => directoriesOf("components");

/** The chart values that stand for each component of deploy/components (docs/install.md, "Helm"). */
export const COMPONENT_VALUES: Record<string, string[]> = {
  "prometheus-operator": ["serviceMonitor.enabled=true", "prometheusRule.enabled=true"],
  "network-policy": ["networkPolicy.enabled=true"],
  "host-port": ["otlp.hostPort.enabled=true"],
  selinux: ["seLinuxOptions.type=spc_t"],
  apparmor: ["appArmorProfile.type=Unconfined"],
  "priority-class": ["priorityClassName=system-node-critical"],
};

/** `helm template` of deploy/helm/lostwrite into namespace `namespace`, with these --set values. */
export async function helmTemplate(helm: string, values: string[], namespace = "lostwrite"): Promise<string> {
  const set = values.flatMap((v) => ["--set", v]);
  return (await execa(helm, ["template", "lostwrite", repoPath("deploy/helm/lostwrite"), "--namespace", namespace, ...set], { cwd: repoPath() })).stdout;
}

export interface Rendering {
  /** e.g. "kustomize deploy/base + network-policy", "helm template (defaults)". */
  name: string;
  /** The YAML as rendered, what `kubectl apply -f -` is given. */
  yaml: string;
  objects: K8sObject[];
}

const rendering = (name: string, yaml: string): Rendering => ({ name, yaml, objects: parseObjects(yaml) });

/** deploy/base, the base with each component and with all, and every overlay, rendered by kubectl's kustomize. */
export async function kustomizeRenderings(): Promise<Rendering[]> {
  const components = componentNames();
  const out = [rendering("kustomize deploy/base", await kustomize(repoPath("deploy/base")))];
  for (const c of components) out.push(rendering(`kustomize deploy/base + ${c}`, await kustomizeOverlay({ "kustomization.yaml": overlayWith([c]) })));
  out.push(rendering("kustomize deploy/base + every component", await kustomizeOverlay({ "kustomization.yaml": overlayWith(components) })));
  for (const o of directoriesOf("overlays")) out.push(rendering(`kustomize deploy/overlays/${o}`, await kustomize(repoPath(`deploy/overlays/${o}`))));
  return out;
}

/** The chart's defaults (with and without its Namespace), each component's values, and all of them. */
export async function helmRenderings(helm: string): Promise<Rendering[]> {
  const out: Rendering[] = [];
  const add = async (name: string, values: string[]): Promise<void> => void out.push(rendering(name, await helmTemplate(helm, values)));
  await add("helm template (defaults)", []);
  await add("helm template (namespace.create)", ["namespace.create=true"]);
  for (const [component, values] of Object.entries(COMPONENT_VALUES)) await add(`helm template (${component}: ${values.join(", ")})`, values);
  await add("helm template (every component's values)", Object.values(COMPONENT_VALUES).flat());
  return out;
}
