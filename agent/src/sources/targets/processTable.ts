// Reads the process table from /proc. The proc root is a parameter so tests
// and the DaemonSet (host /proc mounted elsewhere) read the same code.
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";

export interface ProcessInfo {
  pid: number;
  /** Kernel comm, at most 15 bytes: what the probe reports and metrics label. */
  comm: string;
  /** argv joined by spaces. */
  cmdline: string;
}

export async function listPids(procRoot = "/proc"): Promise<number[]> {
  const entries = await readdir(procRoot);
  return entries.filter((name) => /^\d+$/.test(name)).map(Number);
}

/** Null when the process is gone or unreadable (it may exit while we read). */
export async function readProcess(pid: number, procRoot = "/proc"): Promise<ProcessInfo | null> {
  try {
    const dir = path.join(procRoot, String(pid));
    const [comm, cmdline] = await Promise.all([
      readFile(path.join(dir, "comm"), "utf8"),
      readFile(path.join(dir, "cmdline"), "utf8"),
    ]);
    return { pid, comm: comm.replace(/\n$/, ""), cmdline: cmdline.replace(/\0+$/, "").replaceAll("\0", " ") };
  } catch {
    return null;
  }
}
