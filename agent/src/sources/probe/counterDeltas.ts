// bpftrace prints cumulative per-pid counters every second. Prometheus
// counters must never go back, across bpftrace restarts too, so the agent
// adds only the growth since the last print of the same bpftrace instance.

import type { SyscallCounterKey } from "./controlChannel.ts";

/** "map/k1,k2,…" → map and key. */
function splitId(id: string): [string, number[]] {
  const slash = id.indexOf("/");
  return [id.slice(0, slash), id.slice(slash + 1).split(",").map(Number)];
}

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
   * The entries of `pid` in the maps keyed pid, syscall number, errno: the
   * kernel deletes those one by one (bpftrace cannot delete by a part of a
   * key), so the agent names each one it has seen printed.
   */
  syscallKeysOf(pid: number): SyscallCounterKey[] {
    const keys: SyscallCounterKey[] = [];
    for (const id of this.last.keys()) {
      const [map, key] = splitId(id);
      if ((map === "transient" || map === "failedSends") && key[0] === pid && key.length === 3) {
        keys.push({ map, pid, nr: key[1]!, errno: key[2]! });
      }
    }
    return keys;
  }

  /** The kernel deleted this pid's counters (all of them, syscallKeysOf's too): forget their baselines. */
  forget(pid: number): void {
    for (const id of this.last.keys()) {
      if (splitId(id)[1][0] === pid) this.last.delete(id);
    }
  }
}
