// What the agent's bpftrace processes hold of their compiler, read as the
// kernel reports it (/proc/<pid>/smaps), for the tests of compilerPages.ts.
import { readdirSync, readFileSync } from "node:fs";
import { compilerRanges } from "../../../src/sources/probe/compilerPages.ts";

/** The bpftrace processes agent `agentPid` (a host pid) started, any thread's children. */
export function bpftraceChildren(agentPid: number): number[] {
  const children = readdirSync(`/proc/${agentPid}/task`).flatMap((tid) =>
    readFileSync(`/proc/${agentPid}/task/${tid}/children`, "utf8").split(" ").filter(Boolean).map(Number),
  );
  return children.filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "bpftrace";
    } catch {
      return false;
    }
  });
}

/**
 * Resident bytes of the file's own pages in the mappings the agent pages out
 * (the compiler's code and read-only data) in process `pid`. Their anonymous
 * pages (relocated data the loader made read-only afterwards, about 10 MiB)
 * are the process's own: not paged out without swap, and not counted here.
 */
export function compilerResidentBytes(pid: number): number {
  let resident = 0;
  let inCompiler = false;
  const kib = (line: string): number => Number(/(\d+) kB/.exec(line)?.[1] ?? 0) * 1024;
  for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inCompiler = compilerRanges(line).length > 0;
    else if (inCompiler && line.startsWith("Rss:")) resident += kib(line);
    else if (inCompiler && line.startsWith("Anonymous:")) resident -= kib(line);
  }
  return resident;
}

/** Each bpftrace of the agent with its compiler's resident MiB, for messages. */
export function compilerResidentMiB(agentPid: number): Record<number, number> {
  return Object.fromEntries(bpftraceChildren(agentPid).map((pid) => [pid, Math.round(compilerResidentBytes(pid) / 2 ** 20)]));
}
