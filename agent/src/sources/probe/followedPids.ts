// The part every uprobe program (Go requests, TLS answers) shares: which
// processes it reports on. A uprobe fires in every process that runs the
// probed file; the program reports only for the pids in @lw_pids, a map the
// agent changes while the program runs (followChannel.ts), so a program is
// never restarted because a process came or went. The value is when the
// program started following the pid (kernel ns): a request that started
// before then was not seen whole, and is not judged by the program.
//
// A process is followed from its first instruction, before the agent hears
// of it, the way the socket probe makes targets: a followed process that
// execs stays followed, and with @lw_exec_watch (rules that can match a new
// program) every exec is followed until the agent says it is no target. Its
// exit ends it here, so nothing is kept for processes that are gone. A
// program's first pids are rendered into BEGIN (it starts with them, and a
// restart after a crash starts with the current ones).
//
// The agent hears that a program follows a pid from a `follow` line: for the
// pids of BEGIN, for each follow message, and (ANNOUNCE) at the first call a
// followed process makes into the probed file, so a process followed from its
// exec is announced before its first request, even one that is gone before
// the agent could send it a message.
//
// renderUprobeProgram is the one renderer of what every uprobe program
// shares around its own probes: BEGIN with its followed pids and hello, the
// tick, the follow probes, END; its probes filter on FOLLOWED.
import { EVERY_PROGRAM, FOLLOW_NET_BYTE, MAX_PROGRAM_ID } from "./followChannel.ts";
import { TCP_STATE } from "../../vocabulary/tcpStates.ts";

/**
 * The predicate of every probe of a uprobe program that runs in a process's
 * context. No cast (pid is a uint64 already): a cast in a uprobe makes
 * bpftrace 0.17 load the probed file's DWARF (go_http2.bt, NO CASTS).
 */
export const FOLLOWED = "@lw_pids[pid]";

/** Statements for the probes where a process's use of the file begins: its first hit prints its `follow` line. */
export const ANNOUNCE = `
	if (@lw_said[pid] == 0) {
		@lw_said[pid] = 1;
		printf("follow %llu %d %llu\\n", nsecs, pid, @lw_pids[pid]);
	}`;

export interface FollowedPidsOptions {
  /** This program's id in follow messages (0…254). */
  programId: number;
  /** Host pids followed from the start. */
  pids: readonly number[];
  /** Every exec is followed until the agent decides (its rules can match a new program). */
  execWatch: boolean;
  /** Work per exiting thread of a followed process (its per-thread entries); runs before the pid is let go. */
  onThreadExit?: string;
  /** Work when the agent lets a running process go (`$target` holds its pid; its per-process entries); runs before it is let go. */
  onUnfollow?: string;
}

interface FollowedPidsProgram {
  /** Statements for BEGIN, before its hello: the initial pids, each with its `follow` line. */
  begin: string;
  /** Whole probe blocks: the follow messages, exec and exit. */
  probes: string[];
  /** Statements for END: the maps that must not be printed. */
  end: string;
}

// 127.254.A.B as the kernel stores an IPv4 address (network order), read as a
// little-endian u32: 0xBA_FE_7F in the low three bytes, A above.
const NET_MASK = 0xffff;
const NET_VALUE = (FOLLOW_NET_BYTE << 8) | 127;
const IPPROTO_TCP = 6;

/**
 * The pids a program starts with, as every probe program's BEGIN lists them
 * (this file's and the socket probe's @targets, probeProgram.ts): each once,
 * in ascending order, each a positive integer (anything else is refused,
 * naming it: it would be a map key for no process).
 */
export function initialPids(pids: Iterable<number>): number[] {
  const distinct = [...new Set(pids)];
  for (const pid of distinct) if (!Number.isInteger(pid) || pid <= 0) throw new RangeError(`program pid: expected a positive integer, got ${pid}`);
  return distinct.sort((a, b) => a - b);
}

export function renderFollowedPids(o: FollowedPidsOptions): FollowedPidsProgram {
  if (!Number.isInteger(o.programId) || o.programId < 0 || o.programId > MAX_PROGRAM_ID) {
    throw new RangeError(`uprobe program id: expected 0…${MAX_PROGRAM_ID}, got ${o.programId}`);
  }
  const begin = [
    `@lw_exec_watch = ${o.execWatch ? 1 : 0};`,
    ...initialPids(o.pids).map((pid) => `@lw_pids[(uint64)${pid}] = nsecs;\n\t@lw_said[(uint64)${pid}] = 1;\n\tprintf("follow %llu %d %llu\\n", nsecs, ${pid}, @lw_pids[(uint64)${pid}]);`),
  ].join("\n\t");
  const message = `tracepoint:sock:inet_sock_set_state
{
	// A follow message: the agent's connect from 127.254.A.B to 127.254.C.D
	// (agent/src/sources/probe/followChannel.ts). Fields copied first: the
	// verifier rejects a read of args after a branch.
	$skp = args->skaddr;
	$old = args->oldstate;
	$new = args->newstate;
	$protocol = args->protocol;
	if (pid == $1 && $old == ${TCP_STATE.CLOSE} && $new == ${TCP_STATE.SYN_SENT} && $protocol == ${IPPROTO_TCP}) {
		$sk = (struct sock *)$skp;
		$src = (uint64)$sk->__sk_common.skc_rcv_saddr;
		$dst = (uint64)$sk->__sk_common.skc_daddr;
		if (($src & 0x${NET_MASK.toString(16)}) == 0x${NET_VALUE.toString(16)} && ($dst & 0x${NET_MASK.toString(16)}) == 0x${NET_VALUE.toString(16)}) {
			$word = (((($src >> 16) & 0xff) << 24) | ((($src >> 24) & 0xff) << 16) | ((($dst >> 16) & 0xff) << 8) | (($dst >> 24) & 0xff));
			$op = $word >> 30;
			$program = ($word >> 22) & 0xff;
			$target = $word & 0x3fffff;
			if ($program == ${o.programId} || $program == ${EVERY_PROGRAM}) {
				if ($op == 1) {
					if (@lw_pids[$target] == 0) {
						@lw_pids[$target] = nsecs;
					}
					@lw_said[$target] = 1;
					printf("follow %llu %d %llu\\n", nsecs, $target, @lw_pids[$target]);
				}
				if ($op == 2 && @lw_pids[$target] != 0) {${o.onUnfollow ?? ""}
					delete(@lw_pids[$target]);
					delete(@lw_said[$target]);
					printf("unfollow %llu %d\\n", nsecs, $target);
				}
				if ($op == 3) {
					printf("beat %llu\\n", nsecs);
				}
			}
		}
	}
}`;
  const exec = `tracepoint:sched:sched_process_exec
{
	// In the new program's context, before its first instruction.
	$pid = (uint64)pid;
	if (@lw_exec_watch && @lw_pids[$pid] == 0) {
		@lw_pids[$pid] = nsecs;
	}
}`;
  const exit = `tracepoint:sched:sched_process_exit /${FOLLOWED}/
{${o.onThreadExit ?? ""}
	// The main thread leaving: the process is gone.
	if (pid == tid) {
		delete(@lw_pids[(uint64)pid]);
		delete(@lw_said[(uint64)pid]);
	}
}`;
  return { begin, probes: [message, exec, exit], end: "clear(@lw_pids); clear(@lw_said); clear(@lw_exec_watch);" };
}

interface UprobeProgramParts {
  /** Comment lines that open the program: what generated it, and for which file. */
  comment: string[];
  follow: FollowedPidsOptions;
  /** The program's own probe blocks; those in a process's context filter on FOLLOWED. */
  probes: string[];
  /** Statements for END: the program's own maps that must not be printed. */
  end: string;
}

/** A uprobe program's whole text; bpftrace runs it as `bpftrace -f json FILE AGENT_HOST_PID`. */
export function renderUprobeProgram(parts: UprobeProgramParts): string {
  const followed = renderFollowedPids(parts.follow);
  return [
    ...parts.comment,
    `BEGIN {\n\t${followed.begin}\n\tprintf("hello %llu %d\\n", nsecs, $1);\n}`,
    `interval:s:1 { printf("tick %llu\\n", nsecs); }`,
    ...followed.probes,
    ...parts.probes,
    `END {\n\t${followed.end}\n\t${parts.end}\n}`,
    "",
  ].join("\n\n");
}
