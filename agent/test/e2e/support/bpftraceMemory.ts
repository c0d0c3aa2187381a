// What the agent's bpftrace processes hold of their compiler, read as the
// kernel reports it (/proc/<pid>/smaps), for the tests of compilerPages.ts.
import { readdirSync, readFileSync } from "node:fs";
import { compilerMappings } from "../../../src/sources/probe/compilerPages.ts";

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

/** Resident bytes of the compiler's own pages in process `pid`: what the agent pages out (compilerPages.ts). */
export function compilerResidentBytes(pid: number): number {
  return compilerMappings(readFileSync(`/proc/${pid}/smaps`, "utf8")).residentBytes;
}

/** Each bpftrace of the agent with its compiler's resident MiB, for messages. */
export function compilerResidentMiB(agentPid: number): Record<number, number> {
  return Object.fromEntries(bpftraceChildren(agentPid).map((pid) => [pid, Math.round(compilerResidentBytes(pid) / 2 ** 20)]));
}
