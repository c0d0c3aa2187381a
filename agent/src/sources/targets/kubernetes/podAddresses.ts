// Who is behind an address on this node, from the node's pod list: the
// sender directory the span intake judges senders by (sources/spans/senderTrust.ts).
//
// A pod's own addresses (status.podIPs, else status.podIP) name that pod.
// A host-network pod has the node's addresses, which name no one pod: they
// and every pod's status.hostIPs are the node's. A pod that has finished
// (Succeeded, Failed) no longer owns its address: the network may already
// have given it to a new pod. Two live pods claiming one address (a moment
// during churn, or a broken object) leave it to neither.
import { canonicalAddress } from "../../../ipAddress.ts";
import type { PodRef, SenderDirectory } from "../../spans/senderTrust.ts";
import type { Pod } from "./objects.ts";

/** `listed`: whether `pods` is the node's pod list, or what is known before the first list succeeded. */
export function senderDirectoryOf(pods: Iterable<Pod>, listed = true): SenderDirectory {
  const byAddress = new Map<string, PodRef | "ambiguous">();
  const nodeAddresses = new Set<string>();
  const hostNetworkPods = new Map<string, PodRef>();
  const hostNetworkPodsByUid = new Map<string, PodRef>();
  for (const pod of pods) {
    const ref: PodRef = { namespace: pod.metadata.namespace, pod: pod.metadata.name, uid: pod.metadata.uid ?? null };
    for (const address of addressesOf(pod.status?.hostIPs, pod.status?.hostIP)) nodeAddresses.add(address);
    const phase = pod.status?.phase;
    if (phase === "Succeeded" || phase === "Failed") continue;
    const own = addressesOf(pod.status?.podIPs, pod.status?.podIP);
    if (pod.spec.hostNetwork === true) {
      for (const address of own) nodeAddresses.add(address);
      hostNetworkPods.set(`${ref.namespace}/${ref.pod}`, ref);
      if (ref.uid !== null) hostNetworkPodsByUid.set(ref.uid, ref);
      continue;
    }
    for (const address of own) byAddress.set(address, byAddress.has(address) ? "ambiguous" : ref);
  }
  return {
    listed,
    podAt(address) {
      const found = byAddress.get(address);
      return found === undefined || found === "ambiguous" ? null : found;
    },
    isNodeAddress: (address) => nodeAddresses.has(address),
    hostNetworkPod: (namespace, pod) => hostNetworkPods.get(`${namespace}/${pod}`) ?? null,
    hostNetworkPodByUid: (uid) => hostNetworkPodsByUid.get(uid) ?? null,
  };
}

function addressesOf(list: readonly { ip: string }[] | null | undefined, single: string | null | undefined): string[] {
  const texts = list && list.length > 0 ? list.map((a) => a.ip) : single ? [single] : [];
  return texts.map(canonicalAddress).filter((a): a is string => a !== null);
}
