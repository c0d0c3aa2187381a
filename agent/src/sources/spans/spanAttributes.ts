// The span attribute names lostwrite reads, in one place. There is no
// OpenTelemetry convention for reconcile spans, so the lists hold the names
// operators already use (controller-runtime's log keys first); within a list
// the first attribute present wins. docs/spans.md is written from this module.

/** Resource attributes that say which process sent a span. */
export const PROCESS_ATTRIBUTES = {
  /** The pid inside the pod's PID namespace, not the host pid. */
  pid: "process.pid",
  podUid: "k8s.pod.uid",
  podName: "k8s.pod.name",
  namespace: "k8s.namespace.name",
  containerId: "container.id",
  serviceName: "service.name",
} as const;

/** A span carrying any of these is a reconcile span; they also name the controller. */
export const CONTROLLER_ATTRIBUTES = ["controller", "controller.name", "k8s.controller.name"] as const;
/** Span names that mark a reconcile span without a controller attribute. */
export const RECONCILE_NAME_PREFIXES = ["reconcile", "Reconcile"] as const;
export const OBJECT_KIND_ATTRIBUTES = ["controllerKind", "k8s.object.kind", "kind"] as const;
export const OBJECT_NAMESPACE_ATTRIBUTES = ["namespace", "k8s.namespace.name"] as const;
export const OBJECT_NAME_ATTRIBUTES = ["name", "k8s.object.name"] as const;

/** HTTP client attributes, current semantic conventions first, then the old ones. */
export const HTTP_METHOD_ATTRIBUTES = ["http.request.method", "http.method"] as const;
/** Full URLs: the path is taken from them. */
export const HTTP_URL_ATTRIBUTES = ["url.full", "http.url"] as const;
/** Paths (http.target may carry a query, which is cut off). */
export const HTTP_PATH_ATTRIBUTES = ["url.path", "http.target"] as const;
export const HTTP_STATUS_CODE_ATTRIBUTES = ["http.response.status_code", "http.status_code"] as const;
export const SERVER_ADDRESS_ATTRIBUTES = ["server.address", "net.peer.name"] as const;
export const SERVER_PORT_ATTRIBUTES = ["server.port", "net.peer.port"] as const;
export const ERROR_TYPE_ATTRIBUTE = "error.type";
/** Optional: lets the correlator prefer the span of the thread that failed. Never required. */
export const THREAD_ID_ATTRIBUTE = "thread.id";

/** Every span attribute the index keeps; anything else is dropped at intake to bound memory. */
export const KEPT_SPAN_ATTRIBUTES: ReadonlySet<string> = new Set<string>([
  ...CONTROLLER_ATTRIBUTES,
  ...OBJECT_KIND_ATTRIBUTES,
  ...OBJECT_NAMESPACE_ATTRIBUTES,
  ...OBJECT_NAME_ATTRIBUTES,
  ...HTTP_METHOD_ATTRIBUTES,
  ...HTTP_URL_ATTRIBUTES,
  ...HTTP_PATH_ATTRIBUTES,
  ...HTTP_STATUS_CODE_ATTRIBUTES,
  ...SERVER_ADDRESS_ATTRIBUTES,
  ...SERVER_PORT_ATTRIBUTES,
  ERROR_TYPE_ATTRIBUTE,
  THREAD_ID_ATTRIBUTE,
]);

export type AttributeValue = string | number | boolean;
export type Attributes = Readonly<Record<string, AttributeValue>>;

/** The first attribute of `names` present, as a non-empty string; null if none. */
export function firstString(attrs: Attributes, names: readonly string[]): string | null {
  for (const name of names) {
    const value = attrs[name];
    if (value === undefined) continue;
    const text = String(value);
    if (text !== "") return text;
  }
  return null;
}

/** The first attribute of `names` that is an integer (or an integer string); null if none. */
export function firstInteger(attrs: Attributes, names: readonly string[]): number | null {
  for (const name of names) {
    const value = attrs[name];
    if (value === undefined) continue;
    const n = typeof value === "number" ? value : typeof value === "string" ? Number(value) : NaN;
    if (Number.isSafeInteger(n)) return n;
  }
  return null;
}

/** A status write is a PUT or PATCH whose path ends in `/status`. */
export function isStatusWrite(method: string | null, path: string | null): boolean {
  if (method === null || path === null) return false;
  const m = method.toUpperCase();
  return (m === "PUT" || m === "PATCH") && stripQuery(path).replace(/\/+$/, "").endsWith("/status");
}

/** Any request that changes state on the apiserver. */
export function isWrite(method: string | null): boolean {
  if (method === null) return false;
  return ["POST", "PUT", "PATCH", "DELETE"].includes(method.toUpperCase());
}

/** The path of a URL or request target, without query or fragment; null if it has none. */
export function pathOf(urlOrTarget: string): string | null {
  if (urlOrTarget.startsWith("/")) return stripQuery(urlOrTarget);
  try {
    return new URL(urlOrTarget).pathname;
  } catch {
    return null;
  }
}

export function stripQuery(path: string): string {
  const cut = path.search(/[?#]/);
  return cut === -1 ? path : path.slice(0, cut);
}
