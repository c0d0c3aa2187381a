// Reconciles one Widget: computes its status from its spec and writes it. The
// three modes are the three ways operators handle that write, two of them the
// real-world bugs lostwrite exists to expose.
//   correct      status goes through /status; a failed write is returned, so
//                the key is requeued with backoff (controller-runtime's contract)
//   swallow      status goes through /status; a failed write is logged and
//                dropped: the reconcile reports success, the status is lost
//   update-main  status goes into a PUT of the main resource, which the
//                apiserver answers 200 while ignoring status
import { context, SpanStatusCode, trace, type Tracer } from "@opentelemetry/api";
import type { ApiClient } from "./apiClient.ts";

export type Mode = "correct" | "swallow" | "update-main";
export const MODES: readonly Mode[] = ["correct", "swallow", "update-main"];

export const GROUP = "demo.lostwrite.dev";
export const VERSION = "v1";
export const PLURAL = "widgets";
const CONTROLLER = "widget";

interface WidgetCondition {
  type: string;
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
  observedGeneration: number;
  lastTransitionTime: string;
}

export interface WidgetStatus {
  observedGeneration?: number;
  phase?: string;
  conditions?: WidgetCondition[];
}

export interface Widget {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; generation?: number; resourceVersion?: string; [key: string]: unknown };
  spec?: { paused?: boolean; [key: string]: unknown };
  status?: WidgetStatus;
}

type ReconcileResult = "written" | "up-to-date" | "swallowed" | "gone";

export interface Logger {
  (fields: Record<string, unknown>): void;
}

/** The status a Widget should have: Ready unless spec.paused. */
function desiredStatus(widget: Widget, now: Date): WidgetStatus {
  const generation = widget.metadata?.generation ?? 0;
  const paused = widget.spec?.paused === true;
  const phase = paused ? "Paused" : "Ready";
  const previous = widget.status?.conditions?.find((condition) => condition.type === "Ready");
  const conditionStatus = paused ? "False" : "True";
  return {
    observedGeneration: generation,
    phase,
    conditions: [{
      type: "Ready", status: conditionStatus, reason: paused ? "Paused" : "Reconciled",
      message: paused ? "spec.paused is true" : `generation ${generation} reconciled`,
      observedGeneration: generation,
      lastTransitionTime: previous?.status === conditionStatus ? previous.lastTransitionTime : now.toISOString().replace(/\.\d+Z$/, "Z"),
    }],
  };
}

function isUpToDate(widget: Widget): boolean {
  const desired = desiredStatus(widget, new Date());
  return widget.status?.observedGeneration === desired.observedGeneration && widget.status?.phase === desired.phase;
}

interface ReconcilerOptions {
  client: ApiClient;
  tracer: Tracer;
  mode: Mode;
  log: Logger;
}

export class Reconciler {
  private readonly opts: ReconcilerOptions;

  constructor(opts: ReconcilerOptions) {
    this.opts = opts;
  }

  /** Reconciles `widget` (from the informer cache); throws when the key should be requeued. */
  async reconcile(widget: Widget): Promise<ReconcileResult> {
    const namespace = widget.metadata?.namespace ?? "default";
    const name = widget.metadata?.name ?? "";
    const generation = widget.metadata?.generation ?? 0;
    const span = this.opts.tracer.startSpan("reconcile Widget", {
      attributes: { controller: CONTROLLER, controllerKind: "Widget", namespace, name, generation },
    });
    const spanContext = trace.setSpan(context.active(), span);
    try {
      if (isUpToDate(widget)) return "up-to-date";
      await this.writeStatus(widget, namespace, name, spanContext);
      this.opts.log({ msg: "status written", namespace, name, generation, mode: this.opts.mode });
      return "written";
    } catch (error) {
      if (this.opts.mode === "swallow") {
        // The bug on purpose: the error is logged and the reconcile reports success.
        this.opts.log({ level: "error", msg: "status write failed, ignoring", namespace, name, generation, error: (error as Error).message });
        return "swallowed";
      }
      span.recordException(error as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error).message });
      this.opts.log({ level: "error", msg: "status write failed, requeueing", namespace, name, generation, error: (error as Error).message });
      throw error;
    } finally {
      span.end();
    }
  }

  private async writeStatus(widget: Widget, namespace: string, name: string, spanContext: ReturnType<typeof context.active>): Promise<void> {
    const base = `/apis/${GROUP}/${VERSION}/namespaces/${encodeURIComponent(namespace)}/${PLURAL}/${encodeURIComponent(name)}`;
    const status = desiredStatus(widget, new Date());
    if (this.opts.mode === "update-main") {
      // The bug on purpose: a full update of the main resource carrying status.
      await this.opts.client.request("PUT", base, { ...widget, status }, "application/json", spanContext);
      return;
    }
    await this.opts.client.request("PATCH", `${base}/status`, { status }, "application/merge-patch+json", spanContext);
  }
}
