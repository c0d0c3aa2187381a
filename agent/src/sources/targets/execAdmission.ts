// The first stage of the probe's record path. With rules that can match a
// program started later, the probe traces every exec on the node at once and
// asks; this decides each exec (through the target watcher) and drops what a
// process that is not a target sent in the meantime.
import { existsSync } from "node:fs";
import path from "node:path";
import type { Logger } from "../../telemetry/log.ts";
import type { AgentMetrics } from "../../telemetry/metrics.ts";
import type { ProbeRecord } from "../probe/probeOutput.ts";
import { BoundedSet } from "../../boundedMap.ts";
import type { TargetWatcher } from "./targetWatcher.ts";

interface ExecAdmissionOptions {
  targets: Pick<TargetWatcher, "admitExec">;
  /** Stops tracing a process in the kernel. */
  removeFromKernel: (pid: number) => Promise<void>;
  procRoot: string;
  metrics: AgentMetrics;
  log: Logger;
  /** How long a rejected process stays traced (and dropped here) before the kernel forgets it. */
  removeAfterMs?: number;
}

export class ExecAdmission {
  private readonly opts: ExecAdmissionOptions;
  /**
   * Pids rejected at their exec, so that what the probe sent of them before
   * the decision reached the kernel is dropped rather than reported. Bounded:
   * the oldest are forgotten first, counted, and their late lines judged.
   */
  private readonly rejected: BoundedSet<number>;

  constructor(opts: ExecAdmissionOptions) {
    this.opts = opts;
    this.rejected = new BoundedSet(4096, () => opts.metrics.eventsDropped.inc({ stage: "targets", reason: "capacity" }));
  }

  /** False: the record is dropped (counted), neither judged nor recorded. */
  admit(record: ProbeRecord): boolean {
    if (record.type === "exec") {
      this.decide(record.pid, record.comm);
      return true;
    }
    if (record.type === "counters") {
      record.entries = record.entries.filter(({ key }) => !this.rejected.has(key[0]!));
      return true;
    }
    if ("pid" in record && this.rejected.has(record.pid)) {
      this.opts.metrics.eventsDropped.inc({ stage: "targets", reason: "not_a_target" });
      return false;
    }
    return true;
  }

  /** The pid became a target some other way (a scan): its records count again. */
  forget(pid: number): void {
    this.rejected.delete(pid);
  }

  private decide(pid: number, comm: string): void {
    if (this.opts.targets.admitExec(pid, comm)) {
      this.rejected.delete(pid);
      return;
    }
    this.rejected.add(pid);
    // Removed from the kernel a little later, not at once: a shell or a
    // runtime's init often execs the real program a moment later (after
    // moving itself into the container's cgroup), and a removal landing after
    // that exec would leave the program untraced. Most such processes have
    // exited by then, which removed them in the kernel: no message for them.
    setTimeout(() => {
      if (!this.rejected.has(pid) || !existsSync(path.join(this.opts.procRoot, String(pid)))) return;
      this.opts.removeFromKernel(pid).catch((err: unknown) =>
        this.opts.log.warnRateLimited("exec-decision", "probe did not drop a process that is not a target", { error: String(err) }),
      );
    }, this.opts.removeAfterMs ?? 250).unref();
  }
}
