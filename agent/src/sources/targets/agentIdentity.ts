// Who the agent is to the kernel. bpftrace's `pid` is the host tgid, but in
// the DaemonSet the agent has its own PID namespace (hostPID: false), where
// `process.pid` is 1 or so. The host's /proc, mounted at the proc root, shows
// the agent's own status through `self` (procfs resolves it in the mount's
// PID namespace): its first NSpid entry is the host pid, PPid the host pid of
// the parent. The probe's control channel and the rule that never makes the
// agent its own target both use this identity.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseNsPids } from "./pidNamespace.ts";

export interface AgentIdentity {
  /** The agent's pid as the kernel (and bpftrace) knows it. */
  hostPid: number;
  /** Its parent's, in the same namespace (npm or a shell in development). */
  hostPpid: number;
}

/** From the text of <proc root>/self/status; null when it lacks NSpid or PPid. */
export function parseAgentIdentity(statusText: string): AgentIdentity | null {
  const nsPids = parseNsPids(statusText);
  const ppid = /^PPid:\s*(\d+)\s*$/m.exec(statusText)?.[1];
  if (!nsPids || ppid === undefined) return null;
  return { hostPid: nsPids[0]!, hostPpid: Number(ppid) };
}

/**
 * Reads it once at start-up. Fails with the reason when the proc root is not
 * a procfs that shows the agent (a wrong --proc-root), because a wrong pid
 * would silently turn the control channel off.
 */
export function readAgentIdentity(procRoot: string): AgentIdentity {
  const file = join(procRoot, "self", "status");
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new Error(`proc-root: cannot read ${file} (${(err as Error).message}); is "${procRoot}" the host's /proc?`, { cause: err });
  }
  const identity = parseAgentIdentity(text);
  if (!identity) throw new Error(`proc-root: ${file} has no NSpid/PPid line; is "${procRoot}" a procfs?`);
  return identity;
}
