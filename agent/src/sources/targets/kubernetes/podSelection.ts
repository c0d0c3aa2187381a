// Which pods are operators and which of their containers to watch, decided
// from the pod alone (labels, annotations, owner references, status), and the
// identity their processes carry into every metric and event.
import { containerFromStatusId } from "../cgroup.ts";
import { matchesLabelSelector, type LabelSelector } from "./labelSelector.ts";
import type { Pod } from "./objects.ts";

/** Opt in, by label or annotation, value "true". */
const WATCH_KEY = "lostwrite.dev/watch";
/** Opt out, by annotation, value "true": wins over every opt-in. */
const IGNORE_KEY = "lostwrite.dev/ignore";
/** Comma-separated container names to watch; absent means every container. */
const CONTAINERS_KEY = "lostwrite.dev/containers";

export interface SelectionPolicy {
  /** Pods matching it are watched as if labelled lostwrite.dev/watch=true; empty selects none. */
  labelSelector: LabelSelector;
}

/** A running container of a watched pod, keyed by its runtime id. */
export interface WatchedContainer {
  /** 64-hex id, the same form the cgroup side yields. */
  containerId: string;
  namespace: string;
  pod: string;
  container: string;
  controller: string;
}

export function isWatched(pod: Pod, policy: SelectionPolicy): boolean {
  const labels = pod.metadata.labels ?? {};
  const annotations = pod.metadata.annotations ?? {};
  if (annotations[IGNORE_KEY] === "true") return false;
  return (
    labels[WATCH_KEY] === "true" ||
    annotations[WATCH_KEY] === "true" ||
    matchesLabelSelector(policy.labelSelector, labels)
  );
}

/**
 * The workload that owns the pod. Only pods are readable (the ClusterRole
 * grants nothing else), so the chain is followed by naming convention: a
 * Deployment's ReplicaSet is "<deployment>-<pod-template-hash>", and the pod
 * carries that hash as a label. StatefulSet, DaemonSet, Job and custom owners
 * are named directly. A pod without owner has no controller ("").
 */
export function controllerOf(pod: Pod): string {
  const owners = pod.metadata.ownerReferences ?? [];
  const owner = owners.find((o) => o.controller === true) ?? owners[0];
  if (!owner) return "";
  if (owner.kind === "ReplicaSet") {
    const hash = pod.metadata.labels?.["pod-template-hash"];
    if (hash && owner.name.endsWith(`-${hash}`)) return owner.name.slice(0, -(hash.length + 1));
  }
  return owner.name;
}

function containerNameFilter(pod: Pod): Set<string> | null {
  const list = pod.metadata.annotations?.[CONTAINERS_KEY];
  if (list === undefined) return null;
  return new Set(
    list
      .split(",")
      .map((n) => n.trim())
      .filter((n) => n !== ""),
  );
}

/** The containers of a pod to watch now; empty when the pod is not watched or not running. */
export function watchedContainers(pod: Pod, policy: SelectionPolicy): WatchedContainer[] {
  if (!isWatched(pod, policy)) return [];
  const phase = pod.status?.phase;
  if (phase === "Succeeded" || phase === "Failed") return [];
  const names = containerNameFilter(pod);
  const controller = controllerOf(pod);
  const statuses = [...(pod.status?.containerStatuses ?? []), ...(pod.status?.initContainerStatuses ?? [])];
  const watched: WatchedContainer[] = [];
  for (const status of statuses) {
    if (names && !names.has(status.name)) continue;
    const ref = containerFromStatusId(status.containerID ?? "");
    if (!ref) continue;
    watched.push({
      containerId: ref.id,
      namespace: pod.metadata.namespace,
      pod: pod.metadata.name,
      container: status.name,
      controller,
    });
  }
  return watched;
}
