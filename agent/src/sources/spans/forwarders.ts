// The senders whose resources are taken as sent: a local OpenTelemetry
// Collector (or agent) relaying the operators' spans holds the connection
// itself, so the connection proves only that the Collector sent them. Only
// the configuration can vouch for it (`otlp-forwarders`):
//
//   exe:/usr/bin/otelcol-contrib   the process holding the connection runs this
//                                  executable (its /proc/<pid>/exe link, read
//                                  under --proc-root)
//   pod:observability/otel-agent-*  the sender is this pod (Kubernetes mode: by
//                                  the pod's own address, or the target process
//                                  holding the connection); a trailing `*`
//                                  matches any name with that prefix (a
//                                  DaemonSet's pods)

export type ForwarderSelector =
  | { kind: "exe"; path: string; text: string }
  | { kind: "pod"; namespace: string; name: string; prefix: boolean; text: string };

// RFC 1123 labels and subdomains, as Kubernetes names namespaces and pods.
const NAMESPACE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const POD_NAME = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
const POD_PREFIX = /^[a-z0-9][-a-z0-9.]{0,252}$/;

/** One `otlp-forwarders` entry, or the reason it is not one. */
export function parseForwarder(text: string): ForwarderSelector | { error: string } {
  if (text.startsWith("exe:")) {
    const file = text.slice("exe:".length);
    if (!file.startsWith("/") || file.includes("\0")) return { error: "expected exe:/ABSOLUTE/PATH" };
    return { kind: "exe", path: file, text };
  }
  if (text.startsWith("pod:")) {
    const [namespace, name, extra] = text.slice("pod:".length).split("/");
    if (namespace === undefined || name === undefined || extra !== undefined || !NAMESPACE.test(namespace)) {
      return { error: "expected pod:NAMESPACE/NAME or pod:NAMESPACE/PREFIX*" };
    }
    const prefix = name.endsWith("*");
    const base = prefix ? name.slice(0, -1) : name;
    if (!(prefix ? POD_PREFIX : POD_NAME).test(base)) return { error: `"${name}" is not a pod name${prefix ? " prefix" : ""}` };
    return { kind: "pod", namespace, name: base, prefix, text };
  }
  return { error: "expected exe:/PATH or pod:NAMESPACE/NAME" };
}

/** What the agent knows of a sender to match forwarders on. */
interface ForwarderFacts {
  /** The executable of the process holding the connection; null when not found. */
  exe: string | null;
  /** The sender's pod; null when it is in none, or none is known. */
  pod: { namespace: string; pod: string } | null;
}

/** The first selector the sender matches; null when none does. */
export function matchForwarder(selectors: readonly ForwarderSelector[], facts: ForwarderFacts): ForwarderSelector | null {
  for (const selector of selectors) {
    if (selector.kind === "exe" ? facts.exe === selector.path : podMatches(selector, facts.pod)) return selector;
  }
  return null;
}

function podMatches(selector: Extract<ForwarderSelector, { kind: "pod" }>, pod: ForwarderFacts["pod"]): boolean {
  if (pod === null || pod.namespace !== selector.namespace) return false;
  return selector.prefix ? pod.pod.startsWith(selector.name) : pod.pod === selector.name;
}
