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

/** The pid a process sees for itself (innermost PID namespace). */
export async function nsPidFor(procRoot: string, hostPid: number): Promise<number | null> {
  const pids = await readNsPids(procRoot, hostPid);
  return pids ? (pids[pids.length - 1] ?? null) : null;
}

/**
 * The host pid of the process that calls itself `nsPid`, among candidates
 * (the host pids of one container or pod). Null when none or more than one
 * match: containers of one pod without a shared PID namespace each have a
 * pid 1, and a guess would join spans to the wrong process.
 */
export async function hostPidFor(
  procRoot: string,
  nsPid: number,
  candidateHostPids: Iterable<number>,
): Promise<number | null> {
  const candidates = [...candidateHostPids];
  const innermost = await Promise.all(candidates.map((pid) => nsPidFor(procRoot, pid)));
  let found: number | null = null;
  for (let i = 0; i < candidates.length; i++) {
    if (innermost[i] !== nsPid) continue;
    if (found !== null) return null;
    found = candidates[i] ?? null;
  }
  return found;
}
