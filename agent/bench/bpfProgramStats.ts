// Where a probe's nanoseconds go, from the kernel itself: with
// kernel.bpf_stats_enabled on, every BPF program keeps run_time_ns and
// run_cnt, the time spent in the program proper and how often it ran. That
// is the program's own cost, without the tracepoint's or uprobe's entry and
// exit around it (which the timed loops see on top). The counters cost a
// little themselves while on, so they are on only while the bench runs.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, readlinkSync, writeFileSync } from "node:fs";

const STATS_SWITCH = "/proc/sys/kernel/bpf_stats_enabled";

interface ProgramStats {
  id: number;
  /** The kernel's name for it (at most 15 characters: bpftrace names programs after their probe). */
  name: string;
  runs: number;
  runTimeNs: number;
}

/**
 * The kernel's per-program statistics switch, turned off now: on only for
 * the runs whose program time is read, as the statistics' own clock reads
 * cost every run of every program. restore() sets it back to how it was.
 */
export function bpfStatsSwitch(): { on(): void; off(): void; restore(): void } {
  const before = readFileSync(STATS_SWITCH, "utf8").trim();
  writeFileSync(STATS_SWITCH, "0");
  return {
    on: () => writeFileSync(STATS_SWITCH, "1"),
    off: () => writeFileSync(STATS_SWITCH, "0"),
    restore: () => writeFileSync(STATS_SWITCH, before),
  };
}

/** The BPF programs `pids` hold open, with their counters so far; named through bpftool when it is there. */
export function programStats(pids: readonly number[]): ProgramStats[] {
  const found = programCounters(pids);
  const names = programNames();
  for (const program of found) program.name = names.get(program.id) ?? `prog ${program.id}`;
  return found;
}

/**
 * What the programs `pids` hold ran between two readings of programCounters:
 * runs and run time summed over the programs present in both.
 */
export function ranBetween(before: readonly ProgramStats[], after: readonly ProgramStats[]): { runs: number; runTimeNs: number } {
  const earlier = new Map(before.map((p) => [p.id, p]));
  let runs = 0;
  let runTimeNs = 0;
  for (const program of after) {
    const was = earlier.get(program.id);
    if (!was) continue;
    runs += program.runs - was.runs;
    runTimeNs += program.runTimeNs - was.runTimeNs;
  }
  return { runs, runTimeNs };
}

/** programStats without the names: only /proc reads, cheap enough to take around every timed run. */
export function programCounters(pids: readonly number[]): ProgramStats[] {
  return pids.flatMap((pid) =>
    bpfFdInfo(pid, "prog").map((field) => ({ id: field("prog_id"), name: "", runs: field("run_cnt"), runTimeNs: field("run_time_ns") })),
  );
}

/**
 * The BPF objects of one kind that `pid` holds open, as readers of their
 * fdinfo's numeric fields (NaN for a field not there); none once it exited.
 */
export function bpfFdInfo(pid: number, kind: "prog" | "map"): ((field: string) => number)[] {
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return []; // exited meanwhile
  }
  const found: ((field: string) => number)[] = [];
  for (const fd of fds) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`) !== `anon_inode:bpf-${kind}`) continue;
      const info = readFileSync(`/proc/${pid}/fdinfo/${fd}`, "utf8");
      found.push((name) => Number(new RegExp(`^${name}:\\s+(\\d+)$`, "m").exec(info)?.[1] ?? NaN));
    } catch {
      // closed meanwhile
    }
  }
  return found;
}

function programNames(): Map<number, string> {
  try {
    const listing = JSON.parse(execFileSync("bpftool", ["prog", "show", "-j"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] })) as { id: number; name?: string }[];
    return new Map(listing.map((p) => [p.id, p.name ?? `prog ${p.id}`]));
  } catch {
    return new Map(); // no bpftool: programs go by id
  }
}
