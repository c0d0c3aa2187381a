// Pid-namespace mapping. An operator's spans carry `process.pid` as the
// operator sees it, inside its pod's PID namespace (often 1); the kernel
// events carry host pids. The `NSpid:` line of /proc/<pid>/status lists a
// task's pid in every PID namespace from the one of the proc mount down to
// its own, so with the host's /proc the first entry is the host pid and the
// last is the pid the process sees for itself.
import { readFile } from "node:fs/promises";
import { join } from "node:path";

/** The NSpid entries of a /proc/<pid>/status text, outermost first; null if absent or malformed. */
export function parseNsPids(statusText: string): number[] | null {
  for (const line of statusText.split("\n")) {
    if (!line.startsWith("NSpid:")) continue;
    const fields = line.slice("NSpid:".length).trim().split(/\s+/);
    const pids = fields.map(Number);
    if (pids.length === 0 || pids.some((p) => !Number.isInteger(p) || p <= 0)) return null;
    return pids;
  }
  return null;
}

/** NSpid of a process under a proc root; null when it is gone or the kernel has no NSpid (< 4.1). */
export async function readNsPids(procRoot: string, pid: number): Promise<number[] | null> {
  try {
    return parseNsPids(await readFile(join(procRoot, String(pid), "status"), "utf8"));
  } catch {
    return null;
  }
}
