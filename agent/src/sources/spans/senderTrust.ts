// Whose spans these are, decided by who sent them. In Kubernetes mode the
// agent knows the addresses of the pods on its node, so the address an OTLP
// request came from names the pod, and resource attributes may only agree
// with it: anyone who can reach the intake port could otherwise send spans in
// another pod's name and turn that pod's silent loss into a `noticed` one.
//
//   sender address                     spans are
//   a pod's own address                that pod's; a resource naming another
//                                      pod (name, namespace or uid) is rejected
//   the node's (host-network pods,     a host-network pod's when the resource
//   hostIPs) or loopback               names one of this node, the node's own
//                                      processes' when it names no pod;
//                                      naming any other pod is rejected
//   anything else                      rejected (answered "retry later"
//                                      until the node's pods have been
//                                      listed once: it may be a pod not
//                                      known yet)
//
// Outside Kubernetes mode there is no pod list: resource attributes are taken
// as sent, and the listen address (loopback by default) decides who can send.
import { canonicalAddress, isLoopbackAddress } from "../../ipAddress.ts";
import type { SpanProcess } from "./indexedSpans.ts";

/** Why spans were refused for their sender; a closed set (lostwrite_spans_rejected_total's reason). */
export const SENDER_REJECT_REASONS = ["unknown_sender", "sender_mismatch", "senders_not_listed"] as const;
export type SenderRejectReason = (typeof SENDER_REJECT_REASONS)[number];

export interface PodRef {
  namespace: string;
  pod: string;
  uid: string | null;
}

/** What the pod list says about addresses on this node; addresses in canonicalAddress form. */
export interface SenderDirectory {
  /** False until the node's pods have been listed once: an address found nowhere may then be a pod not known yet. */
  readonly listed: boolean;
  /** The pod whose own (not host-network) address this is; null when none is, or more than one. */
  podAt(address: string): PodRef | null;
  /** An address of this node: a host-network pod's or any pod's hostIP. */
  isNodeAddress(address: string): boolean;
  /** The host-network pod of this node with this namespace and name; null if there is none. */
  hostNetworkPod(namespace: string, pod: string): PodRef | null;
}

export type SenderVerdict =
  | { ok: true; process: SpanProcess }
  | { ok: false; reason: SenderRejectReason; detail: string };

/**
 * The process of a resource's spans as its sender attests it: `claimed` is
 * what the resource says (sender "claimed"), `directory` null outside
 * Kubernetes mode.
 */
export function attributeSender(claimed: SpanProcess, directory: SenderDirectory | null): SenderVerdict {
  if (directory === null) return { ok: true, process: claimed };
  const sender = identifySender(claimed.peerAddress, directory);
  if (!sender.ok) return sender;
  if (sender.pod !== null) {
    const { pod, address } = sender;
    const mismatch = disagreement(claimed, pod);
    if (mismatch !== null) {
      return { ok: false, reason: "sender_mismatch", detail: `${mismatch}, but the sender ${address} is pod ${pod.namespace}/${pod.pod}` };
    }
    return { ok: true, process: { ...claimed, sender: "pod", namespace: pod.namespace, podName: pod.pod, podUid: pod.uid ?? claimed.podUid } };
  }
  if (claimed.podName === null) {
    // A namespace alone names no process: the node's own processes have none.
    return { ok: true, process: { ...claimed, sender: "node", namespace: null, podUid: null } };
  }
  const hostPod = claimed.namespace === null ? null : directory.hostNetworkPod(claimed.namespace, claimed.podName);
  const mismatch = hostPod === null ? `resource ${describeClaim(claimed)} names no host-network pod of this node` : disagreement(claimed, hostPod);
  if (hostPod === null || mismatch !== null) {
    return { ok: false, reason: "sender_mismatch", detail: `${mismatch}; only those share the node's address ${sender.address}` };
  }
  return { ok: true, process: { ...claimed, sender: "pod", podUid: hostPod.uid ?? claimed.podUid } };
}

/**
 * Who is at a sender's address: a pod (its own address), or the node (`pod`
 * null: loopback, the node's addresses). Anything else is refused, and a
 * transport can refuse it before reading the request, so strangers cannot
 * hold the intake's request slots.
 */
export function identifySender(
  peerAddress: string | null,
  directory: SenderDirectory,
): { ok: true; address: string; pod: PodRef | null } | { ok: false; reason: "unknown_sender" | "senders_not_listed"; detail: string } {
  const address = peerAddress === null ? null : canonicalAddress(peerAddress);
  if (address === null) {
    return { ok: false, reason: "unknown_sender", detail: `sender address ${JSON.stringify(peerAddress)} is not an IP address` };
  }
  const pod = directory.podAt(address);
  if (pod !== null) return { ok: true, address, pod };
  if (isLoopbackAddress(address) || directory.isNodeAddress(address)) return { ok: true, address, pod: null };
  if (!directory.listed) {
    return { ok: false, reason: "senders_not_listed", detail: `this node's pods have not been listed yet: sender ${address} may be one of them; retry` };
  }
  return { ok: false, reason: "unknown_sender", detail: `sender ${address} is not a pod of this node, nor the node` };
}

/** The first resource attribute that names another pod than `pod`; null when none does. */
function disagreement(claimed: SpanProcess, pod: PodRef): string | null {
  if (claimed.podName !== null && claimed.podName !== pod.pod) return `resource k8s.pod.name=${JSON.stringify(claimed.podName)}`;
  if (claimed.namespace !== null && claimed.namespace !== pod.namespace) return `resource k8s.namespace.name=${JSON.stringify(claimed.namespace)}`;
  if (claimed.podUid !== null && pod.uid !== null && claimed.podUid !== pod.uid) return `resource k8s.pod.uid=${JSON.stringify(claimed.podUid)}`;
  return null;
}

function describeClaim(claimed: SpanProcess): string {
  return `k8s.namespace.name=${JSON.stringify(claimed.namespace)} k8s.pod.name=${JSON.stringify(claimed.podName)}`;
}
