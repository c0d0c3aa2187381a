// bpftrace prints cumulative per-pid counters every second. Prometheus
// counters must never go back, across bpftrace restarts too, so the agent
// adds only the growth since the last print of the same bpftrace instance.

export class CounterDeltas {
  private last = new Map<string, bigint>();
  private readonly capacity: number;
  dropped = 0;

  constructor(capacity = 65536) {
    this.capacity = capacity;
  }

  /** A new bpftrace instance starts its counters at zero. */
  reset(): void {
    this.last.clear();
  }

  /** Growth of each entry since the previous call; entries that shrank restarted from zero. */
  update(map: string, entries: { key: number[]; value: bigint }[]): { key: number[]; delta: bigint }[] {
    const out: { key: number[]; delta: bigint }[] = [];
    for (const { key, value } of entries) {
      const id = `${map}/${key.join(",")}`;
      const previous = this.last.get(id);
      const delta = previous === undefined || value < previous ? value : value - previous;
      if (previous === undefined && this.last.size >= this.capacity) {
        this.dropped++;
        continue;
      }
      this.last.set(id, value);
      if (delta > 0n) out.push({ key, delta });
    }
    return out;
  }

  /**
   * The kernel deleted this pid's counters: forget their baselines too. Only
   * the maps keyed on the pid alone: bpftrace cannot delete the entries of a
   * pid in a map with a longer key (@transient, @failed_sends), which keep
   * their values, so their baselines must stay or the next print would count
   * them again.
   */
  forget(pid: number): void {
    for (const id of this.last.keys()) {
      if (id.slice(id.indexOf("/") + 1) === String(pid)) this.last.delete(id);
    }
  }
}
