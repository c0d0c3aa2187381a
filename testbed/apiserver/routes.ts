// Maps Kubernetes API URLs to store operations. Pure request → answer, except
// watches, which are returned as a subscription for the HTTP layer to stream.
import { matchesFields, matchesLabels, parseSelector, type Selector } from "./selectors.ts";
import {
  apiVersionOf, coreVersions, findByPath, groupDocument, groupList, groupVersionPath, resourceKey, resourceList,
  versionDocument, type ResourceDef,
} from "./resources.ts";
import { ApiError } from "./status.ts";
import type { KubeObject, ObjectStore } from "./store.ts";
import { toTable, wantsTable } from "./table.ts";
import { createObject, deleteObject, patchObject, patchTypeOf, updateObject, type WriteTarget } from "./writes.ts";

interface ApiRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  accept: string | undefined;
  contentType: string | undefined;
  body: unknown;
}

export interface WatchRequest {
  def: ResourceDef;
  namespace: string | undefined;
  /** null: start with ADDED events for what exists now. */
  fromRevision: number | null;
  fields: Selector;
  labels: Selector;
  timeoutSeconds: number | null;
  bookmarks: boolean;
  /**
   * `sendInitialEvents=true` (client-go's watch-list, on by default since
   * 1.35): the current state as ADDED events, whatever resourceVersion says
   * (NotOlderThan it is), then, with bookmarks allowed, a BOOKMARK annotated
   * `k8s.io/initial-events-end` telling the client its cache is complete.
   */
  initialEvents: boolean;
}

type ApiAnswer = { kind: "json"; status: number; body: unknown } | { kind: "watch"; watch: WatchRequest };

interface ResourcePath {
  def: ResourceDef;
  namespace: string | undefined;
  name: string | undefined;
  subresource: "status" | undefined;
}

const CORE = /^\/api\/v1(?:\/namespaces\/([^/]+))?\/([^/]+)(?:\/([^/]+))?(?:\/([^/]+))?$/;
const GROUPED = /^\/apis\/([^/]+)\/([^/]+)(?:\/namespaces\/([^/]+))?\/([^/]+)(?:\/([^/]+))?(?:\/([^/]+))?$/;

function parseResourcePath(path: string): ResourcePath | undefined {
  let groupVersion: string;
  let parts: (string | undefined)[];
  const core = CORE.exec(path);
  const grouped = core ? null : GROUPED.exec(path);
  if (core) {
    groupVersion = "v1";
    parts = core.slice(1);
  } else if (grouped) {
    groupVersion = `${grouped[1]}/${grouped[2]}`;
    parts = grouped.slice(3);
  } else {
    return undefined;
  }
  const [namespace, plural, name, subresource] = parts.map((part) => (part === undefined ? undefined : decodeURIComponent(part)));
  const def = plural === undefined ? undefined : findByPath(groupVersion, plural);
  if (!def) return undefined;
  if (subresource !== undefined && subresource !== "status") return undefined;
  if (subresource === "status" && !def.statusSubresource) return undefined;
  return { def, namespace, name, subresource };
}

function listOf(def: ResourceDef, items: KubeObject[], resourceVersion: string): unknown {
  return { kind: def.listKind, apiVersion: apiVersionOf(def), metadata: { resourceVersion }, items };
}

function matches(object: KubeObject, fields: Selector, labels: Selector): boolean {
  return matchesFields(object, fields) && matchesLabels(object.metadata.labels, labels);
}

function discovery(path: string): unknown {
  if (path === "/version" || path === "/version/") return versionDocument();
  if (path === "/api" || path === "/api/") return coreVersions();
  if (path === "/api/v1") return resourceList("v1");
  if (path === "/apis" || path === "/apis/") return groupList();
  const group = /^\/apis\/([^/]+)\/?$/.exec(path);
  if (group?.[1]) return groupDocument(group[1]);
  const groupVersion = /^\/apis\/([^/]+\/[^/]+)\/?$/.exec(path);
  if (groupVersion?.[1]) return resourceList(groupVersion[1]);
  return undefined;
}

function isTrue(value: string | null): boolean {
  return value === "1" || value === "true";
}

export function serveApi(store: ObjectStore, req: ApiRequest): ApiAnswer {
  const { method, path, query } = req;
  if (["/healthz", "/livez", "/readyz"].includes(path)) return { kind: "json", status: 200, body: "ok" };
  if (method === "GET") {
    const doc = discovery(path);
    if (doc !== undefined) return { kind: "json", status: 200, body: doc };
  }
  const target = parseResourcePath(path);
  if (!target) throw new ApiError(404, `the server could not find the requested resource (${method} ${path})`);
  const { def, namespace, name, subresource } = target;
  const key = resourceKey(def);
  const writeTarget: WriteTarget = subresource === "status" ? "status" : "main";

  if (name === undefined) {
    if (method === "GET") {
      const fields = parseSelector("field", query.get("fieldSelector"));
      const labels = parseSelector("label", query.get("labelSelector"));
      if (isTrue(query.get("watch"))) {
        const rv = query.get("resourceVersion");
        const initialEvents = isTrue(query.get("sendInitialEvents"));
        const fromRevision = initialEvents || rv === null || rv === "" || rv === "0" ? null : Number(rv);
        if (fromRevision !== null && !Number.isSafeInteger(fromRevision)) throw new ApiError(400, `invalid resourceVersion ${JSON.stringify(rv)}`);
        const timeout = query.get("timeoutSeconds");
        return {
          kind: "watch",
          watch: {
            def, namespace, fromRevision, fields, labels,
            timeoutSeconds: timeout === null ? null : Number(timeout),
            bookmarks: isTrue(query.get("allowWatchBookmarks")),
            initialEvents,
          },
        };
      }
      const { items, resourceVersion } = store.list(key, namespace);
      const selected = items.filter((object) => matches(object, fields, labels));
      return { kind: "json", status: 200, body: wantsTable(req.accept) ? toTable(def, selected, resourceVersion) : listOf(def, selected, resourceVersion) };
    }
    if (method === "POST" && namespace !== undefined && subresource === undefined && def.writable) {
      return { kind: "json", status: 201, body: createObject(store, def, namespace, req.body) };
    }
    throw new ApiError(405, `${method} is not supported on ${path}`);
  }

  if (namespace === undefined) throw new ApiError(404, `${def.kind} is namespaced: use ${groupVersionPath(def)}/namespaces/{namespace}/${def.plural}/${name}`);
  switch (method) {
    case "GET": {
      const object = store.get(key, namespace, name);
      if (!object) throw new ApiError(404, `${def.group === "" ? def.plural : `${def.plural}.${def.group}`} "${name}" not found`, { name, group: def.group, kind: def.plural });
      return { kind: "json", status: 200, body: wantsTable(req.accept) ? toTable(def, [object], object.metadata.resourceVersion ?? "") : object };
    }
    case "PUT":
      return { kind: "json", status: 200, body: updateObject(store, def, namespace, name, req.body, writeTarget) };
    case "PATCH":
      return { kind: "json", status: 200, body: patchObject(store, def, namespace, name, patchTypeOf(req.contentType), req.body, writeTarget) };
    case "DELETE":
      if (subresource !== undefined) break;
      return { kind: "json", status: 200, body: deleteObject(store, def, namespace, name) };
  }
  throw new ApiError(405, `${method} is not supported on ${path}`);
}

export { matches as objectMatches };
