// The write semantics of a Kubernetes apiserver for resources with a status
// subresource, the part operators depend on and get wrong:
//   - writes to the main resource keep the stored status (status in the body is ignored);
//   - writes to /status keep everything but status (spec in the body is ignored);
//   - metadata.generation bumps when spec changes, and only then;
//   - every effective write gets a new resourceVersion, a write that changes
//     nothing gets none (and no watch event);
//   - an update carrying a stale resourceVersion gets 409 Conflict.
import { randomBytes } from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import { applyJsonPatch, applyMergePatch } from "./patch.ts";
import { apiVersionOf, qualifiedName, resourceKey, type ResourceDef } from "./resources.ts";
import { ApiError } from "./status.ts";
import type { KubeObject, ObjectMeta, ObjectStore } from "./store.ts";

export type WriteTarget = "main" | "status";

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Metadata only the server sets; a client's values for these are ignored. */
const SERVER_OWNED_METADATA = ["uid", "creationTimestamp", "generation", "resourceVersion", "namespace", "name"] as const;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function notFound(def: ResourceDef, name: string): ApiError {
  return new ApiError(404, `${qualifiedName(def)} "${name}" not found`, { name, group: def.group, kind: def.plural });
}

function conflict(def: ResourceDef, name: string): ApiError {
  return new ApiError(409,
    `Operation cannot be fulfilled on ${qualifiedName(def)} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
    { name, group: def.group, kind: def.plural });
}

function invalid(def: ResourceDef, name: string, field: string, message: string): ApiError {
  return new ApiError(422, `${def.kind} "${name}" is invalid: ${field}: ${message}`,
    { name, group: def.group, kind: def.kind, causes: [{ reason: "FieldValueInvalid", message, field }] });
}

/** Checks the envelope of an object sent by a client against the URL it was sent to. */
function validateBody(def: ResourceDef, namespace: string, body: unknown, name?: string): KubeObject {
  if (!isRecord(body)) throw new ApiError(400, "the request body must be a JSON object");
  const apiVersion = JSON.stringify(body.apiVersion ?? apiVersionOf(def));
  const kind = JSON.stringify(body.kind ?? def.kind);
  if (apiVersion !== JSON.stringify(apiVersionOf(def)) || kind !== JSON.stringify(def.kind)) {
    throw new ApiError(400, `the API version in the data (${apiVersion}) and kind (${kind}) do not match the URL (${apiVersionOf(def)}, ${def.kind})`);
  }
  const metadata = isRecord(body.metadata) ? body.metadata : {};
  const bodyName = typeof metadata.name === "string" ? metadata.name : undefined;
  if (name !== undefined && bodyName !== undefined && bodyName !== name) {
    throw new ApiError(400, `the name of the object (${bodyName}) does not match the name on the URL (${name})`);
  }
  if (metadata.namespace !== undefined && metadata.namespace !== namespace) {
    throw new ApiError(400, `the namespace of the provided object (${JSON.stringify(metadata.namespace)}) does not match the namespace sent on the request (${namespace})`);
  }
  for (const field of ["spec", "status"] as const) {
    if (body[field] !== undefined && !isRecord(body[field])) {
      throw invalid(def, bodyName ?? name ?? "", field, "must be an object");
    }
  }
  return { ...body, apiVersion: apiVersionOf(def), kind: def.kind, metadata: { ...metadata, namespace, name: bodyName ?? name ?? "" } };
}

function withoutResourceVersion(object: KubeObject): unknown {
  const metadata: Partial<ObjectMeta> = { ...object.metadata };
  delete metadata.resourceVersion;
  return { ...object, metadata };
}

export function createObject(store: ObjectStore, def: ResourceDef, namespace: string, body: unknown): KubeObject {
  const object = validateBody(def, namespace, body);
  const meta = object.metadata;
  if (meta.name === "" && typeof meta.generateName === "string") {
    meta.name = meta.generateName + randomBytes(4).toString("hex").slice(0, 5);
  }
  if (!DNS_SUBDOMAIN.test(meta.name) || meta.name.length > 253) {
    throw invalid(def, meta.name, "metadata.name", `Invalid value: ${JSON.stringify(meta.name)}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'`);
  }
  if (store.get(resourceKey(def), namespace, meta.name)) {
    throw new ApiError(409, `${qualifiedName(def)} "${meta.name}" already exists`, { name: meta.name, group: def.group, kind: def.plural }, "AlreadyExists");
  }
  for (const field of ["uid", "resourceVersion", "creationTimestamp", "generation"] as const) delete meta[field];
  if (def.tracksGeneration) meta.generation = 1;
  // The real apiserver drops status on create when a status subresource exists.
  if (def.statusSubresource) delete object.status;
  return store.commit(resourceKey(def), object);
}

/** Builds the object a write would store, from the current object and the client's object. */
function merged(def: ResourceDef, current: KubeObject, incoming: KubeObject, target: WriteTarget): KubeObject {
  if (target === "status") {
    const next: KubeObject = structuredClone(current);
    if (incoming.status === undefined) delete next.status;
    else next.status = structuredClone(incoming.status);
    return next;
  }
  const metadata: ObjectMeta = { ...incoming.metadata };
  for (const field of SERVER_OWNED_METADATA) {
    if (current.metadata[field] === undefined) delete metadata[field];
    else (metadata as Record<string, unknown>)[field] = current.metadata[field];
  }
  const next: KubeObject = { ...structuredClone(incoming), metadata };
  if (def.statusSubresource) {
    if (current.status === undefined) delete next.status;
    else next.status = structuredClone(current.status);
  }
  if (def.tracksGeneration && !isDeepStrictEqual(next.spec, current.spec)) {
    metadata.generation = (current.metadata.generation ?? 0) + 1;
  }
  return next;
}

function commitIfChanged(store: ObjectStore, def: ResourceDef, current: KubeObject, next: KubeObject): KubeObject {
  if (isDeepStrictEqual(withoutResourceVersion(next), withoutResourceVersion(current))) return current;
  return store.commit(resourceKey(def), next);
}

function assertWritable(def: ResourceDef): void {
  if (!def.writable) throw new ApiError(405, `${qualifiedName(def)} are read-only in the testbed apiserver; fill them through the control API`);
}

/** PUT: a full object, which must carry the resourceVersion it was read at. */
export function updateObject(store: ObjectStore, def: ResourceDef, namespace: string, name: string, body: unknown, target: WriteTarget): KubeObject {
  assertWritable(def);
  const incoming = validateBody(def, namespace, body, name);
  const current = store.get(resourceKey(def), namespace, name);
  if (!current) throw notFound(def, name);
  const rv = incoming.metadata.resourceVersion;
  if (rv === undefined || rv === "") {
    throw invalid(def, name, "metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update");
  }
  if (rv !== current.metadata.resourceVersion) throw conflict(def, name);
  return commitIfChanged(store, def, current, merged(def, current, incoming, target));
}

type PatchType = "merge" | "json";

/** Maps a PATCH Content-Type to the patch format, refusing the ones custom resources do not support. */
export function patchTypeOf(contentType: string | undefined): PatchType {
  const mediaType = (contentType ?? "").split(";")[0]?.trim().toLowerCase();
  switch (mediaType) {
    case "application/merge-patch+json": return "merge";
    case "application/json-patch+json": return "json";
    case "application/strategic-merge-patch+json":
      throw new ApiError(415, "strategic merge patch is not supported for custom resources; use --type=merge or --type=json");
    default:
      throw new ApiError(415, `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json (got ${JSON.stringify(contentType ?? "")})`);
  }
}

/**
 * PATCH: applied to the current object. A resourceVersion in the patch is a
 * precondition (409 when stale); without one the patch applies to whatever is
 * current, which is why operators like status patches.
 */
export function patchObject(store: ObjectStore, def: ResourceDef, namespace: string, name: string, type: PatchType, patch: unknown, target: WriteTarget): KubeObject {
  assertWritable(def);
  const current = store.get(resourceKey(def), namespace, name);
  if (!current) throw notFound(def, name);
  const patched = type === "merge" ? applyMergePatch(current, patch) : applyJsonPatch(current, patch);
  const incoming = validateBody(def, namespace, patched, name);
  if (incoming.metadata.resourceVersion !== undefined && incoming.metadata.resourceVersion !== current.metadata.resourceVersion) {
    throw conflict(def, name);
  }
  return commitIfChanged(store, def, current, merged(def, current, incoming, target));
}

export function deleteObject(store: ObjectStore, def: ResourceDef, namespace: string, name: string): KubeObject {
  assertWritable(def);
  const gone = store.remove(resourceKey(def), namespace, name);
  if (!gone) throw notFound(def, name);
  return gone;
}

/**
 * Create-or-replace without API semantics, for the control API filling
 * read-only resources (pods, EndpointSlices). Keeps the uid of an existing object.
 */
export function upsertObject(store: ObjectStore, def: ResourceDef, body: unknown): KubeObject {
  if (!isRecord(body) || !isRecord(body.metadata) || typeof body.metadata.name !== "string") {
    throw new ApiError(400, "object needs metadata.name");
  }
  const namespace = typeof body.metadata.namespace === "string" ? body.metadata.namespace : "default";
  const object = validateBody(def, namespace, body);
  const current = store.get(resourceKey(def), namespace, object.metadata.name);
  object.metadata.uid = current?.metadata.uid;
  object.metadata.creationTimestamp = current?.metadata.creationTimestamp;
  if (def.tracksGeneration) object.metadata.generation = current?.metadata.generation ?? 1;
  return store.commit(resourceKey(def), object);
}
