// The objects deploy/ renders to, for the tests that check them: kustomize
// output (the base, components, an overlay as a user writes one) parsed into
// objects, and each object checked against the Kubernetes schema of its kind.
import assert from "node:assert/strict";
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

/** `kubectl kustomize DIR`, as objects. */
export async function renderKustomization(dir: string): Promise<K8sObject[]> {
  const { stdout } = await execa(KUBECTL, ["kustomize", dir], { cwd: repoPath() });
  return parseObjects(stdout);
}

/**
 * Renders an overlay as a user writes one, at deploy/overlays/<name> of a
 * copy of the tree whose base and components are the real ones.
 */
export async function renderOverlay(files: Record<string, string>): Promise<K8sObject[]> {
  const dir = await mkdtemp(join(tmpdir(), "lostwrite-overlay-"));
  try {
    await mkdir(join(dir, "deploy/overlays/mine"), { recursive: true });
    await symlink(repoPath("deploy/base"), join(dir, "deploy/base"));
    await symlink(repoPath("deploy/components"), join(dir, "deploy/components"));
    for (const [name, text] of Object.entries(files)) await writeFile(join(dir, "deploy/overlays/mine", name), text);
    return await renderKustomization(join(dir, "deploy/overlays/mine"));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** An overlay's kustomization.yaml: the base plus these components, then `extra`. */
export function overlayWith(components: string[], extra = ""): string {
  return `resources:\n  - ../../base\ncomponents:\n${components.map((c) => `  - ../../components/${c}\n`).join("")}${extra}`;
}
