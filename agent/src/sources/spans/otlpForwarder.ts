// Passes accepted OTLP batches on, byte for byte, to the collector the
// operator would otherwise send to, so pointing an operator at lostwrite
// never costs it its traces. A bounded queue with one sender: when the
// upstream is slow or down, batches are dropped and counted, never buffered
// without limit, and the receiver never waits for the upstream.
import type { AgentMetrics } from "../../telemetry/metrics.ts";
import type { DropReason } from "../../vocabulary/drops.ts";

export interface ForwardBatch {
  body: Buffer;
  contentType: string;
  contentEncoding: string | null;
}

interface OtlpForwarderOptions {
  url: string;
  metrics: AgentMetrics;
  /** Batches waiting to be sent; more are dropped. */
  queueCapacity?: number;
  timeoutMs?: number;
}

export interface OtlpForwarder {
  /** Queues a batch; false (and counted) when the queue is full. */
  enqueue(batch: ForwardBatch): boolean;
  /** Sends what is queued (bounded by the timeout), then stops. */
  close(): Promise<void>;
}

const STAGE = "otlp_forward";

export function createOtlpForwarder(opts: OtlpForwarderOptions): OtlpForwarder {
  const url = new URL(opts.url);
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new Error(`otlpForward: URL must be http or https, got "${opts.url}"`);
  }
  const capacity = opts.queueCapacity ?? 64;
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const queue: ForwardBatch[] = [];
  let sending: Promise<void> | null = null;
  let closing = false;
  const { metrics } = opts;
  metrics.queueLength.set({ queue: "otlpReceiverToForwarder" }, 0);

  const drop = (reason: DropReason): void => {
    metrics.eventsDropped.inc({ stage: STAGE, reason });
  };

  async function sendOne(batch: ForwardBatch): Promise<void> {
    const headers: Record<string, string> = { "content-type": batch.contentType };
    if (batch.contentEncoding !== null) headers["content-encoding"] = batch.contentEncoding;
    try {
      const res = await fetch(url, {
        method: "POST",
        headers,
        body: batch.body,
        signal: AbortSignal.timeout(timeoutMs),
      });
      // The body is not needed, but must be consumed to free the connection.
      await res.arrayBuffer().catch(() => undefined);
      if (!res.ok) drop("upstream_error");
    } catch (err) {
      drop(err instanceof DOMException && err.name === "TimeoutError" ? "expired" : "upstream_error");
    }
  }

  async function drain(): Promise<void> {
    for (let batch = queue.shift(); batch !== undefined; batch = queue.shift()) {
      metrics.queueLength.set({ queue: "otlpReceiverToForwarder" }, queue.length);
      await sendOne(batch);
    }
    sending = null;
  }

  return {
    enqueue(batch) {
      if (closing || queue.length >= capacity) {
        drop("queue_full");
        return false;
      }
      queue.push(batch);
      metrics.queueLength.set({ queue: "otlpReceiverToForwarder" }, queue.length);
      sending ??= drain();
      return true;
    },
    async close() {
      closing = true;
      await sending;
    },
  };
}
