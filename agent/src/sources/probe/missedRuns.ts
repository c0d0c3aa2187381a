// How many times the kernel did not run one of a bpftrace process's programs
// because another BPF program was running on that CPU already (a tracepoint
// hit from softirq in the middle of a send probe's run, for one). The kernel
// drops such a hit without a trace in the program's output; it counts it per
// program, shown in /proc/<pid>/fdinfo/<fd> of each program descriptor as
// `recursion_misses` (Linux 5.12+). A missed connection close is recovered
// by the socket probe itself (MISSED CLOSE in probes/apiserver_sockets.bt);
// this count says how often anything was missed at all.
import { readFile, readdir, readlink } from "node:fs/promises";
import path from "node:path";

const PROGRAM_LINK = "anon_inode:bpf-prog";
const MISSES = /^recursion_misses:\s+(\d+)$/m;

/** The sum of recursion_misses over the BPF programs process `pid` holds; 0 when it holds none or is gone. */
export async function recursionMisses(pid: number, procRoot = "/proc"): Promise<number> {
  const fdDir = path.join(procRoot, String(pid), "fd");
  let fds: string[];
  try {
    fds = await readdir(fdDir);
  } catch {
    return 0;
  }
  let total = 0;
  for (const fd of fds) {
    try {
      if ((await readlink(path.join(fdDir, fd))) !== PROGRAM_LINK) continue;
      const info = await readFile(path.join(procRoot, String(pid), "fdinfo", fd), "utf8");
      total += Number(MISSES.exec(info)?.[1] ?? 0);
    } catch {
      // Closed between the listing and the read: nothing to count.
    }
  }
  return total;
}
