// The object a Kubernetes API path names: /api/v1/namespaces/NS/RESOURCE/NAME
// and /apis/GROUP/VERSION/namespaces/NS/RESOURCE/NAME[/SUBRESOURCE], or the
// same without the namespace part for cluster-scoped resources. Lost requests
// are reported with it, and spans are matched to a request by it.

export interface ApiObject {
  /** Null for a cluster-scoped resource. */
  namespace: string | null;
  /** The resource as the path spells it: "widgets", "pods". */
  resource: string;
  /** Null for a collection (list, watch, create). */
  name: string | null;
  /** "status", "scale"…; null for the object itself. */
  subresource: string | null;
}

/** The object of an API path (a query is ignored); null for anything else (/version, /healthz, a discovery path). */
export function parseApiPath(path: string): ApiObject | null {
  const parts = path.split("?")[0]!.split("/").filter((part) => part !== "");
  let rest: string[];
  if (parts[0] === "api" && parts.length >= 3) rest = parts.slice(2);
  else if (parts[0] === "apis" && parts.length >= 4) rest = parts.slice(3);
  else return null;
  let namespace: string | null = null;
  // "namespaces/NS/…" is a namespaced resource; "namespaces" or "namespaces/NS" alone is the Namespace object itself.
  if (rest[0] === "namespaces" && rest.length >= 3) {
    namespace = decode(rest[1]!);
    rest = rest.slice(2);
  }
  const [resource, name, subresource, ...more] = rest;
  if (resource === undefined || more.length > 0) return null;
  return { namespace, resource: decode(resource), name: name === undefined ? null : decode(name), subresource: subresource ?? null };
}

function decode(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}
