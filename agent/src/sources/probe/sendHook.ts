// Whether the socket probe needs its program on sock:sock_send_length. That
// tracepoint fires at every socket send of every process on the node, and
// its cost is the tracepoint's more than the program's (README, "The send
// hook"): a process pays about +240 ns per send as soon as any program is
// attached there. So the program is rendered without it whenever nothing it
// would see is needed:
//
//   - a target on the socket path (not followed per request by the Go
//     probe) is judged from its sends: it needs the hook;
//   - rules that can match a program started later (comm, cmdline,
//     Kubernetes pods) make every exec a socket-path target at once, and a
//     short-lived client's first sends come 70-140 ms after its exec, before
//     any bpftrace could attach a hook for it: they need it too, unless the
//     user says otherwise (--send-hook targets: a node whose watched pods run
//     Go operators alone then pays nothing per send, and a program a rule
//     matches later is seen once the restarted program attached).
//
// Only when every target is followed per request and no rule can add one is
// the hook left out: at a start of the program, or by a restart without it
// once that has held for a while (bpftraceSupervisor.ts). What the socket
// program then does not see is said in the probe's header (THE SEND HOOK) and
// in README.md.
import type { ProbeState } from "./probeProgram.ts";

type SendHookNeed =
  /** Rules can make a program started later a target on the socket path. */
  | { needed: true; why: "rules" }
  /** This target is on the socket path. */
  | { needed: true; why: "target"; pid: number }
  | { needed: false };

export function sendHookNeed(state: Pick<ProbeState, "targets" | "requestLevel" | "execWatch" | "sendHookForRules">): SendHookNeed {
  if (state.execWatch && state.sendHookForRules !== false) return { needed: true, why: "rules" };
  const followed = new Set(state.requestLevel ?? []);
  for (const pid of state.targets) if (!followed.has(pid)) return { needed: true, why: "target", pid };
  return { needed: false };
}
