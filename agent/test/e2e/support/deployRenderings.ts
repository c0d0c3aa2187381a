// Every form in which deploy/ reaches a cluster: the kustomize base, the base
// with each component (as a user's overlay adds it) and with all of them, each
// overlay under deploy/overlays, and the Helm chart with its defaults, with the
// values that stand for each component, and with all of those.
import { readdirSync } from "node:fs";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { parseAllDocuments } from "yaml";
import { repoPath } from "../../repoPath.ts";

/** The chart values that stand for each component of deploy/components (docs/install.md, "Helm"). */
export const COMPONENT_VALUES: Record<string, string[]> = {
  "prometheus-operator": ["serviceMonitor.enabled=true", "prometheusRule.enabled=true"],
  "network-policy": ["networkPolicy.enabled=true"],
  "host-port": ["otlp.hostPort.enabled=true"],
  selinux: ["seLinuxOptions.type=spc_t"],
  apparmor: ["appArmorProfile.type=Unconfined"],
  "priority-class": ["priorityClassName=system-node-critical"],
};

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

export interface Rendering {
  /** e.g. "kustomize deploy/base + network-policy", "helm template (defaults)". */
  name: string;
  /** The YAML as rendered, what `kubectl apply -f -` is given. */
  yaml: string;
  objects: K8sObject[];
}

export function parseObjects(text: string): K8sObject[] {
  return parseAllDocuments(text)
    .map((d) => d.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => o !== null);
}

/** The component directories under deploy/components, sorted. */
export function componentNames(): string[] {
  return readdirSync(repoPath("deploy/components"), { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name)
    .sort();
}

function overlayNames(): string[] {
  return readdirSync(repoPath("deploy/overlays"), { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name)
    .sort();
}

async function kustomize(kubectl: string, dir: string): Promise<string> {
  return (await execa(kubectl, ["kustomize", dir])).stdout;
}

/** The base plus these components, rendered as an overlay of a user's at deploy/overlays/mine of a copy of the tree. */
export async function renderWithComponents(kubectl: string, components: string[]): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "lostwrite-renderings-"));
  try {
    await mkdir(join(dir, "deploy/overlays/mine"), { recursive: true });
    await symlink(repoPath("deploy/base"), join(dir, "deploy/base"));
    await symlink(repoPath("deploy/components"), join(dir, "deploy/components"));
    const list = components.map((c) => `  - ../../components/${c}\n`).join("");
    await writeFile(join(dir, "deploy/overlays/mine/kustomization.yaml"), `resources:\n  - ../../base\ncomponents:\n${list}`);
    return await kustomize(kubectl, join(dir, "deploy/overlays/mine"));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** deploy/base, the base with each component and with all, and every overlay, rendered by kubectl's kustomize. */
export async function kustomizeRenderings(kubectl: string): Promise<Rendering[]> {
  const out: Rendering[] = [];
  const add = (name: string, yaml: string): void => void out.push({ name, yaml, objects: parseObjects(yaml) });
  add("kustomize deploy/base", await kustomize(kubectl, repoPath("deploy/base")));
  const components = componentNames();
  for (const c of components) add(`kustomize deploy/base + ${c}`, await renderWithComponents(kubectl, [c]));
  add(`kustomize deploy/base + every component`, await renderWithComponents(kubectl, components));
  for (const o of overlayNames()) add(`kustomize deploy/overlays/${o}`, await kustomize(kubectl, repoPath(`deploy/overlays/${o}`)));
  return out;
}

/** `helm template` of deploy/helm/lostwrite into namespace `namespace`, with these --set values. */
export async function helmTemplate(helm: string, values: string[], namespace = "lostwrite"): Promise<string> {
  const set = values.flatMap((v) => ["--set", v]);
  return (await execa(helm, ["template", "lostwrite", repoPath("deploy/helm/lostwrite"), "--namespace", namespace, ...set], { cwd: repoPath() })).stdout;
}

/** The chart's defaults (with and without its Namespace), each component's values, and all of them. */
export async function helmRenderings(helm: string): Promise<Rendering[]> {
  const out: Rendering[] = [];
  const add = async (name: string, values: string[]): Promise<void> => {
    const yaml = await helmTemplate(helm, values);
    out.push({ name, yaml, objects: parseObjects(yaml) });
  };
  await add("helm template (defaults)", []);
  await add("helm template (namespace.create)", ["namespace.create=true"]);
  for (const [component, values] of Object.entries(COMPONENT_VALUES)) await add(`helm template (${component}: ${values.join(", ")})`, values);
  await add("helm template (every component's values)", Object.values(COMPONENT_VALUES).flat());
  return out;
}
