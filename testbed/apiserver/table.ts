// Server-side printing: `kubectl get` asks for a meta.k8s.io Table and prints
// its columns. Answering one gives kubectl the same output as a real cluster.
import type { ResourceDef } from "./resources.ts";
import type { KubeObject } from "./store.ts";

function humanAge(timestamp: string | undefined): string {
  if (!timestamp) return "<unknown>";
  const seconds = Math.max(0, Math.floor((Date.now() - Date.parse(timestamp)) / 1000));
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 172_800) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86_400)}d`;
}

function cell(object: KubeObject, path: string): unknown {
  if (path === "age") return humanAge(object.metadata.creationTimestamp);
  let value: unknown = object;
  for (const part of path.split(".")) value = typeof value === "object" && value !== null ? (value as Record<string, unknown>)[part] : undefined;
  return value ?? "";
}

export function wantsTable(accept: string | undefined): boolean {
  return (accept ?? "").split(",").some((part) => part.includes("as=Table"));
}

export function toTable(def: ResourceDef, objects: KubeObject[], resourceVersion: string): unknown {
  return {
    kind: "Table", apiVersion: "meta.k8s.io/v1", metadata: { resourceVersion },
    columnDefinitions: def.columns.map(({ name, type, format, description }) => ({ name, type, format: format ?? "", description, priority: 0 })),
    rows: objects.map((object) => ({
      cells: def.columns.map((column) => cell(object, column.path)),
      object: { kind: "PartialObjectMetadata", apiVersion: "meta.k8s.io/v1", metadata: object.metadata },
    })),
  };
}
