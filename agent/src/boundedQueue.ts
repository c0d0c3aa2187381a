// A queue between two pipeline stages, named for who writes and who reads it
// (probeToCorrelator). It never grows past its capacity: a push beyond it is
// dropped and counted, and the writer learns it (OTLP answers 429). Items are
// consumed in order, in batches, off the writer's call stack.
import type { AgentMetrics } from "./telemetry/metrics.ts";
import type { DropStage } from "./vocabulary/drops.ts";

interface BoundedQueueOptions<T> {
  name: DropStage;
  capacity: number;
  metrics: AgentMetrics;
  consume: (item: T) => void;
  /** Items consumed per turn of the event loop, so a burst does not starve I/O. */
  batch?: number;
}

export class BoundedQueue<T> {
  private items: T[] = [];
  private head = 0;
  private scheduled = false;
  private readonly opts: Required<BoundedQueueOptions<T>>;

  constructor(opts: BoundedQueueOptions<T>) {
    this.opts = { batch: 512, ...opts };
    opts.metrics.queueLength.set({ queue: opts.name }, 0);
    opts.metrics.eventsDropped.inc({ stage: opts.name, reason: "queue_full" }, 0);
  }

  get length(): number {
    return this.items.length - this.head;
  }

  /** False when full: the item was dropped and counted. An arrow property: a writer is handed it as it is. */
  readonly push = (item: T): boolean => {
    if (this.length >= this.opts.capacity) {
      this.opts.metrics.eventsDropped.inc({ stage: this.opts.name, reason: "queue_full" });
      return false;
    }
    this.items.push(item);
    this.opts.metrics.queueLength.set({ queue: this.opts.name }, this.length);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.drain());
    }
    return true;
  };

  private drain(): void {
    this.scheduled = false;
    const end = Math.min(this.items.length, this.head + this.opts.batch);
    while (this.head < end) {
      const item = this.items[this.head]!;
      this.head++;
      this.opts.consume(item);
    }
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    } else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.drain());
    }
    this.opts.metrics.queueLength.set({ queue: this.opts.name }, this.length);
  }
}
