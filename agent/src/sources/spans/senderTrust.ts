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
//   hostIPs) or loopback               names one of this node (by name or by
//                                      uid), the node's own processes' when
//                                      it names no pod; naming any other pod
//                                      is rejected
//   anything else                      rejected (answered "retry later"
//                                      until the node's pods have been
//                                      listed once: it may be a pod not
//                                      known yet)
//
// On loopback and the node's addresses the address names no process, and
// outside Kubernetes mode there is no pod list at all: there the connection
// itself decides (judgeClaims below). The process holding the client end of
// the request's connection (socketOwner.ts) is the sender; a resource's
// process.pid and pod may only agree with it.
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
  /** The host-network pod of this node with this uid; null if there is none. */
  hostNetworkPodByUid(uid: string): PodRef | null;
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
  if (claimed.podName === null && claimed.podUid === null) {
    // A namespace alone names no process: the node's own processes have none.
    return { ok: true, process: { ...claimed, sender: "node", namespace: null, podUid: null } };
  }
  const hostPod = namedHostNetworkPod(claimed, directory);
  const mismatch = hostPod === null ? `resource ${describeClaim(claimed)} names no host-network pod of this node` : disagreement(claimed, hostPod);
  if (hostPod === null || mismatch !== null) {
    return { ok: false, reason: "sender_mismatch", detail: `${mismatch}; only those share the node's address ${sender.address}` };
  }
  return { ok: true, process: { ...claimed, sender: "pod", namespace: hostPod.namespace, podName: hostPod.pod, podUid: hostPod.uid ?? claimed.podUid } };
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

/**
 * The host-network pod a resource names, by name (and namespace) or, naming
 * none, by uid: a uid alone names a pod as surely as its name, and left
 * unchecked would let a sender on the node's address claim a pod it is not in.
 */
function namedHostNetworkPod(claimed: SpanProcess, directory: SenderDirectory): PodRef | null {
  if (claimed.podName !== null) return claimed.namespace === null ? null : directory.hostNetworkPod(claimed.namespace, claimed.podName);
  return claimed.podUid === null ? null : directory.hostNetworkPodByUid(claimed.podUid);
}

/** The first resource attribute that names another pod than `pod`; null when none does. */
function disagreement(claimed: SpanProcess, pod: PodRef): string | null {
  if (claimed.podName !== null && claimed.podName !== pod.pod) return `resource k8s.pod.name=${JSON.stringify(claimed.podName)}`;
  if (claimed.namespace !== null && claimed.namespace !== pod.namespace) return `resource k8s.namespace.name=${JSON.stringify(claimed.namespace)}`;
  if (claimed.podUid !== null && pod.uid !== null && claimed.podUid !== pod.uid) return `resource k8s.pod.uid=${JSON.stringify(claimed.podUid)}`;
  return null;
}

function describeClaim(claimed: SpanProcess): string {
  const uid = claimed.podUid === null ? "" : ` k8s.pod.uid=${JSON.stringify(claimed.podUid)}`;
  return `k8s.namespace.name=${JSON.stringify(claimed.namespace)} k8s.pod.name=${JSON.stringify(claimed.podName)}${uid}`;
}

/** A process the agent follows, as the kernel and /proc know it. */
export interface KnownProcess {
  hostPid: number;
  /** The pid it sees for itself (innermost NSpid): what its spans carry as process.pid. */
  nsPid: number;
  comm: string;
  /** Its pod; null outside one, or outside Kubernetes mode. */
  namespace: string | null;
  pod: string | null;
}

/**
 * Who holds the client end of a request's connection, as far as the agent
 * could tell: a target process (its spans are proven to be its own), a
 * sender the configuration names as a forwarder (its resources are taken as
 * sent), or anything else: a process that is no target (`processes`, its own
 * pids) or none found (`processes` empty).
 */
export type ConnectionSender =
  | { kind: "target"; process: KnownProcess }
  | { kind: "forwarder"; name: string }
  | { kind: "other"; processes: { hostPid: number; nsPid: number | null; comm: string }[]; name: string };

export type ClaimVerdict =
  | { ok: true; process: SpanProcess; proven: boolean }
  | { ok: false; reason: "sender_mismatch"; detail: string; claimed: string; actual: string };

interface ClaimContext {
  /** Kubernetes mode: a target's pod is known, so a target outside pods is on the node. */
  podsKnown: boolean;
  /** The target a resource names by its process.pid (and pod, when it names one); null when it names none. */
  namedTarget: (claimed: SpanProcess) => KnownProcess | null;
}

/**
 * A resource's claims against the connection's sender (docs/spans.md, "Who
 * may send spans"). From a target, process.pid must be its own pid and a pod
 * named must be its pod, and the spans are that process's whatever the
 * resource says (no process.pid: still its). From a forwarder, the resource
 * is taken as sent. From anything else, a resource that names a target is
 * refused; any other is taken but proves nothing (`proven` false): its spans
 * are passed on but not correlated.
 */
export function judgeClaims(claimed: SpanProcess, sender: ConnectionSender, context: ClaimContext): ClaimVerdict {
  if (sender.kind === "forwarder") return { ok: true, process: { ...claimed, sender: "claimed" }, proven: true };
  if (sender.kind === "target") {
    const actual = sender.process;
    const mismatch = claimDisagreement(claimed, actual, context.podsKnown);
    if (mismatch !== null) {
      const named = context.namedTarget(claimed);
      return refuse(named === null ? mismatch : `${mismatch} (target ${describeProcess(named)})`, describeProcess(actual));
    }
    return {
      ok: true,
      proven: true,
      process: {
        ...claimed,
        sender: "process",
        hostPid: actual.hostPid,
        pid: actual.nsPid,
        namespace: actual.namespace,
        podName: actual.pod,
        podUid: actual.pod === null ? null : claimed.podUid,
      },
    };
  }
  // Its own pid in its own namespace is no claim on anyone else.
  if (claimed.pid !== null && sender.processes.some((p) => p.nsPid === claimed.pid)) return { ok: true, process: claimed, proven: false };
  const named = context.namedTarget(claimed);
  if (named !== null) return refuse(`resource process.pid=${claimed.pid} (target ${describeProcess(named)})`, sender.name);
  return { ok: true, process: claimed, proven: false };
}

function refuse(claim: string, actual: string): ClaimVerdict {
  return { ok: false, reason: "sender_mismatch", detail: `${claim}, but the connection is ${actual}'s`, claimed: claim, actual };
}

/** The first claim of the resource that is not true of `actual`; null when none is. */
function claimDisagreement(claimed: SpanProcess, actual: KnownProcess, podsKnown: boolean): string | null {
  if (claimed.pid !== null && claimed.pid !== actual.nsPid) return `resource process.pid=${claimed.pid}`;
  // Outside Kubernetes mode no pod is known: a pod named can be checked against nothing, and is dropped.
  if (!podsKnown) return null;
  if (claimed.podName !== null && claimed.podName !== actual.pod) return `resource k8s.pod.name=${JSON.stringify(claimed.podName)}`;
  if (claimed.namespace !== null && claimed.namespace !== actual.namespace) return `resource k8s.namespace.name=${JSON.stringify(claimed.namespace)}`;
  return null;
}

/** "python3[4242]", with its pod when it has one: how the log names a process. */
export function describeProcess(p: { hostPid: number; comm: string; namespace?: string | null; pod?: string | null }): string {
  const pod = p.pod ? ` (pod ${p.namespace ?? ""}/${p.pod})` : "";
  return `${p.comm}[${p.hostPid}]${pod}`;
}
