// A watched workload's per-process series: their labels, created at zero
// when it is watched, counted from the kernel's events, removed with its pod.
// Every label value is kept inside its closed set (metrics.ts), so series
// stay bounded whatever the kernel says.
import type { ConnectionLossReason, ProcessIdentity, SocketEvent } from "../model.ts";
import { CONNECTION_LOSS_REASONS } from "../vocabulary/causes.ts";
import { ERRNO_LABELS } from "../vocabulary/errno.ts";
import { SYSCALL_LABELS } from "../vocabulary/syscalls.ts";
import { closed, type AgentMetrics } from "./metrics.ts";

type Workload = Pick<ProcessIdentity, "namespace" | "pod" | "container" | "process">;

export function workloadLabels(identity: Workload): Record<"namespace" | "pod" | "container" | "process", string> {
  return { namespace: identity.namespace, pod: identity.pod, container: identity.container, process: identity.process };
}

export function errnoLabel(errno: string | null): string {
  return errno === null ? "none" : closed(ERRNO_LABELS, errno);
}

/** Before correlation: the failed syscall itself. Connection deaths are not syscalls. */
export function recordSocketEvent(
  metrics: AgentMetrics,
  event: Pick<SocketEvent, "syscall" | "errno">,
  identity: Workload,
  count = 1,
): void {
  if (event.syscall === null) return;
  metrics.syscallErrors.inc(
    { ...workloadLabels(identity), syscall: closed(SYSCALL_LABELS, event.syscall), errno: errnoLabel(event.errno) },
    count,
  );
}

export function recordConnectionLoss(metrics: AgentMetrics, identity: Workload, reason: ConnectionLossReason): void {
  metrics.connectionLosses.inc({ ...workloadLabels(identity), reason });
}

/** A watched workload's per-process series, at zero until something happens. */
export function initWorkloadSeries(metrics: AgentMetrics, labels: ReturnType<typeof workloadLabels>): void {
  metrics.writes.inc(labels, 0);
  metrics.writeBytes.inc(labels, 0);
  metrics.retransmits.inc(labels, 0);
  for (const reason of CONNECTION_LOSS_REASONS) metrics.connectionLosses.inc({ ...labels, reason }, 0);
}

/**
 * A pod that went away takes its series with it, so label sets stay bounded
 * by the pods alive on the node, not by every pod the node ever ran.
 */
export async function removePodSeries(metrics: AgentMetrics, namespace: string, pod: string): Promise<void> {
  const perWorkload = [
    metrics.statusWriteLost,
    metrics.syscallErrors,
    metrics.writes,
    metrics.writeBytes,
    metrics.connectionLosses,
    metrics.retransmits,
  ];
  for (const metric of perWorkload) {
    const { values } = await metric.get();
    for (const { labels } of values) {
      if (labels.namespace === namespace && labels.pod === pod) metrics.removeSeries(metric, labels);
    }
  }
}
