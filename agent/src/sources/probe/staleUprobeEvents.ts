// A bpftrace killed by SIGKILL (a pod's PID namespace torn down, an OOM
// kill, the agent itself killed) leaves its uprobe events behind in tracefs.
// bcc names them from the probed path, offset and bpftrace's pid, e.g.
// p__proc_1_fd_29_18433c0_1_bcc_36. In a pod the agent is pid 1, its
// descriptors and its bpftrace's pids come out the same run after run, so
// the next agent's program collides with a dead one's event: "cannot attach
// uprobe, File exists", and that binary is never followed again. Before a
// uprobe program starts, the agent removes the events left on paths under
// its own /proc/PID/fd/ by a bpftrace that is gone. The kernel refuses to
// remove an event in use (EBUSY) anyway; a live bpftrace's events are left
// alone before that, as they may be made and not yet in use.
import { appendFile, readFile } from "node:fs/promises";
import path from "node:path";

/** One line of uprobe_events: `p:uprobes/NAME PATH:0xOFFSET` (r: for a return probe). */
const EVENT_LINE = /^[pr]:([^/\s]+)\/(\S+) (\S+):0x[0-9a-f]+/;

/** bcc's suffix of an event's name: the pid of the process that made it. */
const MAKER = /_bcc_(\d+)$/;

interface AgentEvent {
  /** GROUP/NAME, as uprobe_events takes it back. */
  name: string;
  /** The pid of the bpftrace that made it. */
  maker: number;
}

/** The events of `uprobeEvents` (the file's text) that bcc made on a path under `/proc/PID/fd/`. */
export function eventsOnAgentFds(uprobeEvents: string, agentPid: number): AgentEvent[] {
  const prefix = `/proc/${agentPid}/fd/`;
  const events: AgentEvent[] = [];
  for (const line of uprobeEvents.split("\n")) {
    const match = EVENT_LINE.exec(line.trim());
    const maker = match ? MAKER.exec(match[2]!) : null;
    if (match && maker && match[3]!.startsWith(prefix)) events.push({ name: `${match[1]}/${match[2]}`, maker: Number(maker[1]) });
  }
  return events;
}

async function isBpftrace(pid: number): Promise<boolean> {
  try {
    return (await readFile(`/proc/${pid}/comm`, "utf8")).trim() === "bpftrace";
  } catch {
    return false;
  }
}

/**
 * Removes the uprobe events bcc left on paths under this agent's
 * /proc/PID/fd/; returns how many went. Those in use stay (the kernel says
 * EBUSY), as does everything when tracefs is not there or not writable.
 */
export async function removeStaleUprobeEvents(agentPid: number, tracefsRoots: readonly string[]): Promise<number> {
  for (const root of tracefsRoots) {
    const file = path.join(root, "uprobe_events");
    let text: string;
    try {
      text = await readFile(file, "utf8");
    } catch {
      continue;
    }
    let removed = 0;
    for (const { name, maker } of eventsOnAgentFds(text, agentPid)) {
      if (await isBpftrace(maker)) continue;
      try {
        // One write per event: the kernel takes or refuses each on its own.
        await appendFile(file, `-:${name}\n`);
        removed++;
      } catch {
        // In use by a running bpftrace (EBUSY), or gone meanwhile.
      }
    }
    return removed;
  }
  return 0;
}
