// A bounded set of pids, oldest forgotten first: the processes whose exec the
// agent decided were not targets, so that what the probe sent of them before
// the decision reached the kernel is dropped rather than reported.
export class RecentPids {
  private readonly pids = new Set<number>();
  private readonly capacity: number;

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  add(pid: number): void {
    this.pids.delete(pid);
    this.pids.add(pid);
    if (this.pids.size > this.capacity) this.pids.delete(this.pids.values().next().value!);
  }

  delete(pid: number): void {
    this.pids.delete(pid);
  }

  has(pid: number): boolean {
    return this.pids.has(pid);
  }
}
