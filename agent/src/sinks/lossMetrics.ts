// The Prometheus loss metrics, one of the sinks: every loss event counted in
// lostwrite_status_write_lost_total, its trace the series' exemplar. Label
// values are kept inside their closed sets (telemetry/metrics.ts), so series
// stay bounded whatever the kernel and the spans say.
import type { LossEvent, ProcessIdentity } from "../model.ts";
import type { LossSink } from "../stage.ts";
import { LOSS_CAUSES, NOTICED, VERDICTS } from "../vocabulary/causes.ts";
import { closed, traceExemplar, type AgentMetrics } from "../telemetry/metrics.ts";
import { errnoLabel } from "../telemetry/workloadSeries.ts";
import { isStatusWrite } from "../sources/spans/spanAttributes.ts";

/**
 * Controller names come from spans, i.e. from outside: the first `capacity`
 * distinct values are labels, later ones become "other".
 */
export class BoundedLabel {
  private readonly seen = new Set<string>();
  private readonly capacity: number;
  constructor(capacity: number) {
    this.capacity = capacity;
  }
  value(raw: string): string {
    if (this.seen.has(raw)) return raw;
    if (this.seen.size >= this.capacity) return "other";
    this.seen.add(raw);
    return raw;
  }
}

/** Counts a loss; its trace (if the loss was joined with a span) becomes the series' exemplar. */
export function recordLoss(metrics: AgentMetrics, event: LossEvent, controller: string): void {
  const request =
    event.request === null ? "unknown" : isStatusWrite(event.request.method ?? "", event.request.path ?? "") ? "status" : "other";
  const labels = {
    namespace: event.namespace ?? "",
    pod: event.pod ?? "",
    container: event.container ?? "",
    process: event.process ?? "",
    controller,
    request,
    cause: closed(LOSS_CAUSES, event.cause),
    errno: errnoLabel(event.errno),
    noticed: closed(NOTICED, event.noticed),
    verdict: closed(VERDICTS, event.verdict ?? "certain"),
  };
  metrics.incWithExemplar(metrics.statusWriteLost, labels, traceExemplar(event.trace_id, event.span_id));
}

/** What the sink asks of the targets: the controller of a process, when it is known. */
interface ProcessControllers {
  identity(pid: number): { identity: Pick<ProcessIdentity, "controller"> } | undefined;
}

export class LossMetricsSink implements LossSink {
  readonly name = "loss metrics";
  readonly #metrics: AgentMetrics;
  readonly #processes: ProcessControllers;
  readonly #controllers = new BoundedLabel(256);

  constructor(metrics: AgentMetrics, processes: ProcessControllers) {
    this.#metrics = metrics;
    this.#processes = processes;
  }

  /** The controller is the reconcile's (from its span), else the process's (its pod's owner). */
  publish(event: LossEvent): void {
    const identity = event.pid === null ? null : this.#processes.identity(event.pid)?.identity;
    recordLoss(this.#metrics, event, this.#controllers.value(event.reconcile?.controller ?? identity?.controller ?? ""));
  }
}
