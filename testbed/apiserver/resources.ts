// The resources the testbed serves and the discovery documents describing
// them. Widgets are the custom resource the sample operator reconciles; pods
// and EndpointSlices exist so Kubernetes-aware agent code has something real
// to list and watch (they are read-only over the API; tests fill them through
// the control API).

export interface TableColumn {
  name: string;
  type: "string" | "integer" | "date";
  format?: string;
  description: string;
  /** Dotted path into the object, or "age" for the creation timestamp. */
  path: string;
}

export interface ResourceDef {
  group: string;
  version: string;
  kind: string;
  listKind: string;
  plural: string;
  singular: string;
  shortNames: string[];
  /** Served through the Kubernetes API for writes (create/update/patch/delete). */
  writable: boolean;
  /** Has a `/status` subresource: main writes ignore status, status writes ignore everything else. */
  statusSubresource: boolean;
  /** metadata.generation starts at 1 and bumps on spec change only. */
  tracksGeneration: boolean;
  columns: TableColumn[];
}

const NAME_COLUMN: TableColumn = { name: "Name", type: "string", format: "name", description: "Name of the object", path: "metadata.name" };
const AGE_COLUMN: TableColumn = { name: "Age", type: "date", description: "Time since creation", path: "age" };

const WIDGETS: ResourceDef = {
  group: "demo.lostwrite.dev", version: "v1", kind: "Widget", listKind: "WidgetList",
  plural: "widgets", singular: "widget", shortNames: ["wd"],
  writable: true, statusSubresource: true, tracksGeneration: true,
  columns: [
    NAME_COLUMN,
    { name: "Phase", type: "string", description: "status.phase", path: "status.phase" },
    { name: "Generation", type: "integer", description: "metadata.generation", path: "metadata.generation" },
    { name: "Observed", type: "integer", description: "status.observedGeneration", path: "status.observedGeneration" },
    AGE_COLUMN,
  ],
};

const PODS: ResourceDef = {
  group: "", version: "v1", kind: "Pod", listKind: "PodList", plural: "pods", singular: "pod", shortNames: ["po"],
  writable: false, statusSubresource: true, tracksGeneration: false,
  columns: [
    NAME_COLUMN,
    { name: "Status", type: "string", description: "status.phase", path: "status.phase" },
    { name: "Node", type: "string", description: "spec.nodeName", path: "spec.nodeName" },
    AGE_COLUMN,
  ],
};

const ENDPOINT_SLICES: ResourceDef = {
  group: "discovery.k8s.io", version: "v1", kind: "EndpointSlice", listKind: "EndpointSliceList",
  plural: "endpointslices", singular: "endpointslice", shortNames: [],
  writable: false, statusSubresource: false, tracksGeneration: false,
  columns: [NAME_COLUMN, { name: "AddressType", type: "string", description: "addressType", path: "addressType" }, AGE_COLUMN],
};

const RESOURCES: readonly ResourceDef[] = [WIDGETS, PODS, ENDPOINT_SLICES];

export function apiVersionOf(def: ResourceDef): string {
  return def.group === "" ? def.version : `${def.group}/${def.version}`;
}

/** Store key and the path prefix of the group-version (`/api/v1`, `/apis/g/v`). */
export function resourceKey(def: ResourceDef): string {
  return `${apiVersionOf(def)}/${def.plural}`;
}

export function groupVersionPath(def: ResourceDef): string {
  return def.group === "" ? `/api/${def.version}` : `/apis/${def.group}/${def.version}`;
}

/** `widgets.demo.lostwrite.dev` / `pods`: how Kubernetes names a resource in messages. */
export function qualifiedName(def: ResourceDef): string {
  return def.group === "" ? def.plural : `${def.plural}.${def.group}`;
}

export function findByKind(apiVersion: string, kind: string): ResourceDef | undefined {
  return RESOURCES.find((def) => apiVersionOf(def) === apiVersion && def.kind === kind);
}

export function findByPath(groupVersion: string, plural: string): ResourceDef | undefined {
  return RESOURCES.find((def) => apiVersionOf(def) === groupVersion && def.plural === plural);
}

export function versionDocument(): Record<string, string> {
  return {
    major: "1", minor: "32", gitVersion: "v1.32.0-lostwrite-testbed", gitCommit: "0000000000000000000000000000000000000000",
    gitTreeState: "clean", buildDate: "2026-01-01T00:00:00Z", goVersion: "go1.23.0", compiler: "gc",
    platform: "linux/amd64",
  };
}

export function coreVersions(): unknown {
  return { kind: "APIVersions", versions: ["v1"], serverAddressByClientCIDRs: [{ clientCIDR: "0.0.0.0/0", serverAddress: "127.0.0.1" }] };
}

function groups(): Map<string, ResourceDef[]> {
  const byGroup = new Map<string, ResourceDef[]>();
  for (const def of RESOURCES) {
    if (def.group === "") continue;
    byGroup.set(def.group, [...(byGroup.get(def.group) ?? []), def]);
  }
  return byGroup;
}

export function groupList(): unknown {
  return {
    kind: "APIGroupList", apiVersion: "v1",
    groups: [...groups()].map(([name, defs]) => {
      const versions = [...new Set(defs.map((def) => def.version))].map((version) => ({ groupVersion: `${name}/${version}`, version }));
      return { name, versions, preferredVersion: versions[0] };
    }),
  };
}

export function groupDocument(group: string): unknown {
  const defs = groups().get(group);
  if (!defs) return undefined;
  const versions = [...new Set(defs.map((def) => def.version))].map((version) => ({ groupVersion: `${group}/${version}`, version }));
  return { kind: "APIGroup", apiVersion: "v1", name: group, versions, preferredVersion: versions[0] };
}

export function resourceList(groupVersion: string): unknown {
  const defs = RESOURCES.filter((def) => apiVersionOf(def) === groupVersion);
  if (defs.length === 0) return undefined;
  const readVerbs = ["get", "list", "watch"];
  const writeVerbs = ["create", "delete", "get", "list", "patch", "update", "watch"];
  return {
    kind: "APIResourceList", apiVersion: "v1", groupVersion,
    resources: defs.flatMap((def) => [
      {
        name: def.plural, singularName: def.singular, namespaced: true, kind: def.kind,
        verbs: def.writable ? writeVerbs : readVerbs, shortNames: def.shortNames,
        storageVersionHash: "",
      },
      ...(def.statusSubresource
        ? [{ name: `${def.plural}/status`, singularName: "", namespaced: true, kind: def.kind, verbs: def.writable ? ["get", "patch", "update"] : ["get"] }]
        : []),
    ]),
  };
}
