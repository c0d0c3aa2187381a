// Container → host pids, by scanning a proc root: every process whose cgroup
// names one of the wanted container ids. A process in a container stays in
// it, and with pid_max in the millions a pid is not reused within one scan
// interval, so a pid's container is remembered while the pid lives. "Not in a
// container" is not remembered: the runtime moves a new container's first
// process into its cgroup just after creating it, and that process keeps its
// pid when it execs the container's entrypoint.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { readContainerOf } from "../cgroup.ts";
import { inBatches, listPids } from "../processTable.ts";

interface ContainerProcess {
  pid: number;
  /** The process' comm, as the kernel reports it (at most 15 bytes). */
  comm: string;
  containerId: string;
}

interface ScanResult {
  processes: ContainerProcess[];
  /** Matching processes left out because the result was at capacity. */
  dropped: number;
}

interface ContainerProcessScannerOptions {
  procRoot: string;
  /** Largest result; a container forking without bound must not grow the target set without bound. */
  maxProcesses: number;
  /** Pids whose container is remembered between scans; past it, new pids are read every scan. */
  maxRememberedPids: number;
}

export class ContainerProcessScanner {
  readonly #opts: ContainerProcessScannerOptions;
  /** pid → container id, only for containerised pids alive at the last scan. */
  #containerOf = new Map<number, string>();

  constructor(opts: ContainerProcessScannerOptions) {
    this.#opts = opts;
  }

  async scan(wantedContainerIds: ReadonlySet<string>): Promise<ScanResult> {
    // Synchronously, in batches, as processTable.ts reads /proc and says why.
    let pids: number[];
    try {
      pids = listPids(this.#opts.procRoot);
    } catch (err) {
      throw new Error(`cannot list proc root "${this.#opts.procRoot}": ${(err as Error).message}`, { cause: err });
    }
    const next = new Map<number, string>();
    const unknown: number[] = [];
    for (const pid of pids) {
      const known = this.#containerOf.get(pid);
      if (known === undefined) unknown.push(pid);
      else next.set(pid, known);
    }
    const read: ReturnType<typeof readContainerOf>[] = [];
    await inBatches(unknown, (pid) => read.push(readContainerOf(this.#opts.procRoot, pid)));
    const matched: { pid: number; containerId: string }[] = [];
    for (const [pid, id] of next) if (wantedContainerIds.has(id)) matched.push({ pid, containerId: id });
    for (let i = 0; i < unknown.length; i++) {
      const pid = unknown[i] ?? 0;
      const id = read[i]?.id;
      if (id === undefined) continue;
      if (next.size < this.#opts.maxRememberedPids) next.set(pid, id);
      if (wantedContainerIds.has(id)) matched.push({ pid, containerId: id });
    }
    this.#containerOf = next;

    matched.sort((a, b) => a.pid - b.pid);
    const kept = matched.slice(0, this.#opts.maxProcesses);
    const comms: (string | null)[] = [];
    await inBatches(kept, (m) => comms.push(this.#readComm(m.pid)));
    const processes: ContainerProcess[] = [];
    kept.forEach((m, i) => {
      const comm = comms[i];
      // Null: the process exited since the directory was read.
      if (comm !== null && comm !== undefined) processes.push({ ...m, comm });
    });
    return { processes, dropped: matched.length - kept.length };
  }

  #readComm(pid: number): string | null {
    try {
      return readFileSync(join(this.#opts.procRoot, String(pid), "comm"), "utf8").replace(/\n$/, "");
    } catch {
      return null;
    }
  }
}
