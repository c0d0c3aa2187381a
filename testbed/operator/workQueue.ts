// A work queue with client-go's semantics, which controllers depend on:
//   - a key is queued at most once however often it is added (dirty set);
//   - a key being processed is not handed to a second worker; if it is added
//     meanwhile, it is queued again when the first worker is done;
//   - failures requeue with per-key exponential backoff until forget().
// Bounded: past `capacity` distinct keys, adds are dropped and counted.

interface WorkQueueOptions {
  capacity?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
}

export class WorkQueue {
  private readonly queue: string[] = [];
  private readonly dirty = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly waiters: ((key: string | undefined) => void)[] = [];
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly capacity: number;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private shuttingDown = false;
  /** Adds refused because the queue was full. */
  dropped = 0;

  constructor(opts: WorkQueueOptions = {}) {
    this.capacity = opts.capacity ?? 10_000;
    this.baseDelayMs = opts.baseDelayMs ?? 100;
    this.maxDelayMs = opts.maxDelayMs ?? 5_000;
  }

  get length(): number {
    return this.queue.length;
  }

  add(key: string): void {
    if (this.shuttingDown || this.dirty.has(key)) return;
    if (this.dirty.size + this.processing.size >= this.capacity) {
      this.dropped += 1;
      return;
    }
    this.dirty.add(key);
    if (this.processing.has(key)) return;
    const waiter = this.waiters.shift();
    if (waiter) {
      this.dirty.delete(key);
      this.processing.add(key);
      waiter(key);
    } else {
      this.queue.push(key);
    }
  }

  /** Requeues `key` after its backoff: base × 2^(failures so far), capped. */
  addRateLimited(key: string): number {
    const failures = this.failures.get(key) ?? 0;
    if (this.failures.size < this.capacity || this.failures.has(key)) this.failures.set(key, failures + 1);
    const delay = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** failures);
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      this.add(key);
    }, delay);
    this.timers.add(timer);
    return delay;
  }

  /** Ends the backoff of `key` (it succeeded, or it was given up on). */
  forget(key: string): void {
    this.failures.delete(key);
  }

  failuresOf(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  /** Next key to work on; undefined once the queue shuts down. */
  get(): Promise<string | undefined> {
    const key = this.queue.shift();
    if (key !== undefined) {
      this.dirty.delete(key);
      this.processing.add(key);
      return Promise.resolve(key);
    }
    if (this.shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  done(key: string): void {
    this.processing.delete(key);
    if (this.dirty.has(key)) {
      this.dirty.delete(key);
      this.add(key);
    }
  }

  shutdown(): void {
    this.shuttingDown = true;
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    for (const waiter of this.waiters.splice(0)) waiter(undefined);
  }
}
