// Reads the process table from /proc. The proc root is a parameter so tests
// and the DaemonSet (host /proc mounted elsewhere) read the same code.
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";

export interface ProcessInfo {
  pid: number;
  /** Kernel comm, at most 15 bytes: what the probe reports and metrics label. */
  comm: string;
  /** argv joined by spaces; "" when not read. */
  cmdline: string;
}

export async function listPids(procRoot = "/proc"): Promise<number[]> {
  const entries = await readdir(procRoot);
  return entries.filter((name) => /^\d+$/.test(name)).map(Number);
}

/** argv as /proc/<pid>/cmdline holds it (NUL-separated) joined by spaces. */
export function cmdlineText(raw: string): string {
  return raw.replace(/\0+$/, "").replaceAll("\0", " ");
}

/**
 * Null when the process is gone or unreadable (it may exit while we read).
 * The command line is read only when asked for: a rescan of every process
 * every second should not read argv it does not match on.
 */
export async function readProcess(pid: number, procRoot = "/proc", withCmdline = true): Promise<ProcessInfo | null> {
  try {
    const dir = path.join(procRoot, String(pid));
    const [comm, cmdline] = await Promise.all([
      readFile(path.join(dir, "comm"), "utf8"),
      withCmdline ? readFile(path.join(dir, "cmdline"), "utf8") : Promise.resolve(""),
    ]);
    return { pid, comm: comm.replace(/\n$/, ""), cmdline: cmdlineText(cmdline) };
  } catch {
    return null;
  }
}
