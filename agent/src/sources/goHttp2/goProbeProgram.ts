// The bpftrace program that reads one Go binary's HTTP/2 client requests:
// uprobes at the entries of the functions http2Families.ts names, attached by
// file offset (so stripped binaries work), reporting for the followed pids
// only (followedPids.ts). Its lines are the goHttp2 family of probeLines.ts.
//
// Entry probes only: a uretprobe rewrites the return address on the
// goroutine's stack, and Go moves stacks — the process would crash. Every
// value is read at a function's entry, from the registers of Go's register
// ABI (Go 1.17+ on amd64: arguments in AX, BX, CX, DI, SI, …, the current
// goroutine in R14) and from the structs they point at, at the offsets of the
// family's verified layout (goBinary/http2Layouts.ts): the e2e tests run these
// probes on real binaries of every family, and on kubectl.
//
// bpftrace needs --unsafe to attach a uprobe at a raw offset into a binary
// without symbols; the program uses nothing else that flag unlocks (no
// system(), no signal(), no writes to user memory).
import type { FunctionLocation, Http2Family, ProbePlacement } from "../goBinary/inspectGoBinary.ts";
import type { Http2FamilyName, Http2Function } from "../goBinary/http2Families.ts";
import { probeSymbolName } from "../goBinary/probeSymbolFile.ts";
import type { Http2Layout } from "../goBinary/http2Layouts.ts";
import { ANNOUNCE, FOLLOWED, renderUprobeProgram, type FollowedPidsOptions } from "../probe/followedPids.ts";

/** Longest piece of a path printed in one line; keeps a printf's stack use under bpftrace's 512 bytes. */
export const PATH_PART_BYTES = 120;

/** Path pieces printed at most: the first two and the last, so a status write is told even in a path longer than that. */
export const PATH_PARTS = 3;

/** What the Go programs add to bpftrace's environment: strings as long as a path piece. */
export const GO_PROBE_ENV = { BPFTRACE_STRLEN: String(PATH_PART_BYTES + 8) } as const;

interface GoProbeTarget extends Omit<FollowedPidsOptions, "onThreadExit"> {
  /** What bpftrace attaches to: the binary through a path that outlives its processes, e.g. /proc/<agent>/fd/12. */
  binary: string;
  families: readonly Pick<Http2Family, "name" | "functions" | "layout">[];
  /**
   * "entry" (the binary has a symbol table): each uprobe is given as the
   * function's virtual address. bpftrace 0.17 reads `uprobe:FILE:0xN` as an
   * address and looks it up in the symbol table: a file offset that happens
   * to fall inside another function's addresses (any offset past 0x401000,
   * so in every binary larger than about 4 MiB, as a controller-runtime
   * manager is) is refused as a probe inside that function. The address
   * resolves to the function itself. "named branch": each uprobe is given by
   * the name probeSymbolName gives its stack check's jump, which a debug file
   * of the binary defines (probeSymbolFile.ts). Without a symbol table (or
   * when omitted) the number is the file offset, which is what bpftrace
   * takes then.
   */
  probePlacement?: ProbePlacement;
}

// The socket of a *ClientConn in $cc: cc.tconn (a net.Conn; its data word
// 8 further) is a *tls.Conn, whose conn (a net.Conn too) is a *net.TCPConn,
// whose conn's fd is its *netFD, whose poll.FD has Sysfd. Then through the
// task's file table to the socket; 0 when the descriptor is no socket (or is
// closed already: Go sets Sysfd to -1).
const socketOf = (l: Http2Layout): string => `
		$tls = *(uint64 *)($cc + ${l.connTconn + 8});
		$tcp = *(uint64 *)($tls + ${l.tlsConnConn + 8});
		$netfd = *(uint64 *)($tcp + ${l.tcpConnFd});
		$fd = *(int64 *)($netfd + ${l.netFdSysfd});
		$sk = (struct sock *)kptr(0);
		if ($fd >= 0 && $fd < 1048576) {
			$file = (struct file *)*(curtask->files->fdt->fd + $fd);
			if ($file != 0) {
				if (($file->f_inode->i_mode & 0xf000) == 0xc000) {
					$sk = ((struct socket *)$file->private_data)->sk;
				}
			}
		}`;

// Its peer and TCP state; what is no socket reads as port 0, state 0.
const PEER_OF_SOCKET = `
		$port = (uint64)0;
		$family = (uint64)0;
		$state = (uint64)0;
		if ((uint64)$sk != 0) {
			$raw = $sk->__sk_common.skc_dport;
			$port = (uint64)((($raw & 0xff) << 8) | ($raw >> 8));
			$family = (uint64)$sk->__sk_common.skc_family;
			$state = (uint64)$sk->__sk_common.skc_state;
		}`;

/** A printf whose last field is the peer's address: ntop needs its family as a constant. */
function printWithPeer(format: string, args: string): string {
  return `
		if ($family == 10) {
			printf("${format}\\n", ${args}, ntop(10, $sk->__sk_common.skc_v6_daddr.in6_u.u6_addr8));
		} else if ($family == 2) {
			printf("${format}\\n", ${args}, ntop(2, $sk->__sk_common.skc_daddr));
		} else {
			printf("${format}\\n", ${args}, ntop(2, (uint32)0));
		}`;
}

/** Prints the path pieces at offsets 0, 120 and the last 120 bytes (or 240 when the path fits in three). */
const PATH = `
		printf("go_path %d %llu %d %s\\n", pid, $cs, 0, str($path, $pathLen));
		if ($pathLen > ${PATH_PART_BYTES}) {
			printf("go_path %d %llu %d %s\\n", pid, $cs, ${PATH_PART_BYTES}, str($path + ${PATH_PART_BYTES}, $pathLen - ${PATH_PART_BYTES}));
		}
		if ($pathLen > ${2 * PATH_PART_BYTES}) {
			$last = $pathLen > ${PATH_PARTS * PATH_PART_BYTES} ? $pathLen - ${PATH_PART_BYTES} : (uint64)${2 * PATH_PART_BYTES};
			printf("go_path %d %llu %d %s\\n", pid, $cs, $last, str($path + $last, $pathLen - $last));
		}`;

/**
 * What each probed function reads, at the offsets of `l`; `$cc` etc. are
 * bpftrace variables. What is kept between probes (per goroutine, per
 * connection) is keyed by pid as well: the processes of one binary (an
 * operator's replicas on one node) allocate alike, so their goroutines and
 * connections share addresses.
 */
const bodiesOf = (l: Http2Layout): Record<Http2Function, string> => ({
  // (*clientStream).encodeAndWriteHeaders(cs, req): the request's HEADERS go
  // out now, on the stream whose ID and cc are assigned. One probe reads all
  // a loss report needs: the stream's connection and id, the request's
  // Method (a string) and URL's Path. A process's first request announces
  // that it is followed. Entered before the connection's write lock: a
  // request whose client gives up while another write holds that lock was
  // not sent (it is then judged by its connection's end, as lost).
  encodeAndWriteHeaders: `${ANNOUNCE}
	$cs = reg("ax");
	$req = reg("bx");
	$cc = *(uint64 *)($cs + ${l.streamConn});
	$id = *(uint32 *)($cs + ${l.streamId});
	$method = *(uint64 *)($req + ${l.requestMethod});
	$methodLen = *(uint64 *)($req + ${l.requestMethod + 8});
	$url = *(uint64 *)($req + ${l.requestUrl});
	$path = *(uint64 *)($url + ${l.urlPath});
	$pathLen = *(uint64 *)($url + ${l.urlPath + 8});${socketOf(l)}${PEER_OF_SOCKET}
		// Kept for the connection's end, when its descriptor may be closed already.
		if ((uint64)$sk != 0) {
			@go_conn_sk[pid, $cc] = (uint64)$sk;
		}${printWithPeer("go_request %llu %d %d %llu %llu %d %d %s %d %s", "nsecs, pid, tid, $cc, $cs, $id, $pathLen, str($method, $methodLen > 16 ? 16 : $methodLen), $port")}${PATH}`,
  // (*clientConnReadLoop).processHeaders(rl, f *MetaHeadersFrame): rl.cc;
  // f's *HeadersFrame (its StreamID) and Fields ([]hpack.HeaderField: Name,
  // Value strings; the slice's length 8 after its pointer). The first field
  // of a response is :status.
  processHeaders: `
	$cc = *(uint64 *)(reg("ax") + ${l.readLoopConn});
	$f = reg("bx");
	$id = *(uint32 *)(*(uint64 *)($f + ${l.metaHeadersFrame}) + ${l.frameStreamId});
	$fields = *(uint64 *)($f + ${l.metaFields});
	if (*(uint64 *)($f + ${l.metaFields + 8}) > 0) {
		$nameLen = *(uint64 *)($fields + ${l.fieldName + 8});
		$valueLen = *(uint64 *)($fields + ${l.fieldValue + 8});
		printf("go_headers %llu %d %llu %d %s %s\\n", nsecs, pid, $cc, $id,
			str(*(uint64 *)($fields + ${l.fieldName}), $nameLen > 16 ? 16 : $nameLen), str(*(uint64 *)($fields + ${l.fieldValue}), $valueLen > 16 ? 16 : $valueLen));
	}`,
  // processResetStream(rl, f *RSTStreamFrame): its StreamID and ErrCode.
  processResetStream: `
	$f = reg("bx");
	printf("go_reset %llu %d %llu %d %d\\n", nsecs, pid, *(uint64 *)(reg("ax") + ${l.readLoopConn}), *(uint32 *)($f + ${l.frameStreamId}), *(uint32 *)($f + ${l.rstErrCode}));`,
  // processGoAway(rl, f *GoAwayFrame): LastStreamID and ErrCode.
  processGoAway: `
	$f = reg("bx");
	printf("go_goaway %llu %d %llu %d %d\\n", nsecs, pid, *(uint64 *)(reg("ax") + ${l.readLoopConn}), *(uint32 *)($f + ${l.goAwayLastStreamId}), *(uint32 *)($f + ${l.goAwayErrCode}));`,
  // (*clientConnReadLoop).cleanup(rl): the read loop ended; the socket's
  // state says who ended it (CLOSE_WAIT: the server's FIN; CLOSE: a reset or
  // a timeout). Another goroutine may have closed the descriptor first (a
  // reset connection, now and then): then the socket its requests were
  // written on, remembered per connection, tells. That socket may be freed
  // by then; the read cannot fault, and a freed socket's memory keeps the
  // state it died in until it is reused (measured: 85 of 85 resets right).
  cleanup: `
	$cc = *(uint64 *)(reg("ax") + ${l.readLoopConn});${socketOf(l)}
		if ((uint64)$sk == 0) {
			$sk = (struct sock *)@go_conn_sk[pid, $cc];
		}
		delete(@go_conn_sk[pid, $cc]);${PEER_OF_SOCKET}${printWithPeer("go_conn_closed %llu %d %llu %d %d %s", "nsecs, pid, $cc, $state, $port")}`,
  // (*ClientConn).writeStreamReset(cc, streamID, code, …): the client resets
  // a stream whose headers it sent — it gave up on it (CANCEL), or its write
  // failed; NO_ERROR after an early answer. Never called for a request
  // answered and read as usual, unlike abortStream (every body close).
  writeStreamReset: `
	printf("go_abort %llu %d %d %llu %d %d\\n", nsecs, pid, tid, reg("ax"), reg("bx") & 0xffffffff, reg("cx") & 0xffffffff);`,
});

/** What follows `uprobe:FILE:` for one function, by where the binary's probes go. */
function attachPoint(placement: ProbePlacement | undefined, family: Http2FamilyName, fn: Http2Function, location: FunctionLocation): string {
  if (placement === "named branch" && location.branchVaddr !== null) return probeSymbolName(family, fn);
  const at = placement === "entry" || placement === "named branch" ? location.vaddr : location.probeOffset;
  return `0x${at.toString(16)}`;
}

/** The program text; bpftrace runs it as `bpftrace --unsafe -f json FILE AGENT_HOST_PID`. */
export function renderGoProgram(target: GoProbeTarget): string {
  if (/["\s]/.test(target.binary)) throw new RangeError(`Go probe binary path must not hold quotes or spaces: "${target.binary}"`);
  if (target.families.length === 0) throw new RangeError(`Go probe for ${target.binary}: no HTTP/2 family to probe`);
  const probes = target.families.flatMap((family) => {
    const bodies = bodiesOf(family.layout);
    return (Object.keys(bodies) as Http2Function[]).map((fn) => {
      const location = family.functions[fn];
      return `// ${location.symbol}\nuprobe:${target.binary}:${attachPoint(target.probePlacement, family.name, fn, location)} /${FOLLOWED}/ {${bodies[fn]}\n}`;
    });
  });
  return renderUprobeProgram({
    comment: [
      "// Generated by lostwrite for one Go binary: see agent/src/sources/goHttp2/goProbeProgram.ts.",
      `// Families: ${target.families.map((f) => f.name).join(", ")}; program ${target.programId}.`,
    ],
    follow: target,
    probes,
    end: "clear(@go_conn_sk);",
  });
}
