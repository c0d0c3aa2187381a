// Which host processes are targets: explicit pids, and processes whose comm or
// cmdline matches a rule. Rescanned on an interval so a process started after
// the agent is watched within one interval, and an exited one is dropped.
import { inBatches, listPids, readProcess, type ProcessInfo } from "./processTable.ts";

export type TargetSource = "pid" | "comm" | "cmdline" | "kubernetes";

export interface Target extends ProcessInfo {
  source: TargetSource;
}

export interface TargetRules {
  pids: number[];
  comm: RegExp | null;
  cmdline: RegExp | null;
  /** Never targets: the agent itself and its bpftrace children. */
  exclude: (pid: number) => boolean;
}

/**
 * Whether a program started later can be a target (a comm or cmdline rule,
 * or Kubernetes pods): then the probe traces every exec at once and the agent
 * decides, so no process is missed until the next scan.
 */
export function newProgramsCanMatch(config: { "target-comm"?: string | undefined; "target-cmdline"?: string | undefined; kubernetes: boolean }): boolean {
  return Boolean(config["target-comm"] || config["target-cmdline"] || config.kubernetes);
}

interface TargetDiff {
  added: Target[];
  removed: Target[];
  current: Map<number, Target>;
}

/** The rule that makes a process a target, first match in this order; null for none. */
export function ruleFor(rules: TargetRules, info: ProcessInfo): Exclude<TargetSource, "kubernetes"> | null {
  if (rules.pids.includes(info.pid)) return "pid";
  if (rules.comm?.test(info.comm)) return "comm";
  if (rules.cmdline?.test(info.cmdline)) return "cmdline";
  return null;
}

export async function scanTargets(rules: TargetRules, procRoot = "/proc"): Promise<Map<number, Target>> {
  const found = new Map<number, Target>();
  const explicit = new Set(rules.pids);
  const candidates = rules.comm || rules.cmdline ? listPids(procRoot) : [...explicit];
  await inBatches(new Set([...candidates, ...explicit]), (pid) => {
    if (rules.exclude(pid)) return;
    const info = readProcess(pid, procRoot, rules.cmdline !== null);
    if (!info) return;
    const source = ruleFor(rules, info);
    if (source) found.set(pid, { ...info, source });
  });
  return found;
}

export function diffTargets(previous: Map<number, Target>, current: Map<number, Target>): TargetDiff {
  const added = [...current.values()].filter((t) => !previous.has(t.pid));
  // A pid whose comm changed was reused (or exec'd): treat it as a new process.
  const removed = [...previous.values()].filter((t) => current.get(t.pid)?.comm !== t.comm);
  const readded = removed.filter((t) => current.has(t.pid)).map((t) => current.get(t.pid)!);
  return { added: [...added, ...readded], removed, current };
}
