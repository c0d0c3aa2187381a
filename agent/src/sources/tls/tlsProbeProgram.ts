// The bpftrace program that reads, for the targets using one OpenSSL (a
// libssl.so a process mapped, or an executable with OpenSSL linked in, as
// node's), whether the requests they wrote through it were answered: what
// SSL_read handed the caller, not what arrived on the socket. Its one line
// is the tls family of probeLines.ts.
//
// Why: on a fresh TLS 1.3 connection the server's session tickets can arrive
// after the first request (always from OpenSSL servers; from Go's, the
// apiserver's, when it asks for a client certificate). On the wire a ticket
// looks like an answer; OpenSSL consumes it and SSL_read returns nothing.
//
// Which socket an SSL object writes to is learned from the first TCP send on
// its thread after a call on it: python's socket BIO sends its ClientHello
// inside SSL_do_handshake, node's memory BIO right after the SSL call that
// started the handshake (measured: node's first call on a new connection is
// SSL_read, and it writes the request with SSL_write nested inside it).
//
// Per socket the program keeps the request in flight (@tls_since, @tls_bytes):
// from the first SSL_write after the last answer, with the plaintext bytes
// written, until an SSL_read returns at least TLS_ANSWER_MIN_BYTES. An
// SSL_write that has not returned success (@tls_pending: a body blocked on a
// shut window, retried after WANT_WRITE, or failing with its connection) is
// unanswered too, with the bytes it was asked to write: a client that never
// finished writing its request was never answered. When the socket reaches
// CLOSE it prints what is still unanswered; the agent puts that in place of
// the socket probe's own count for the same socket (tlsAnswers.ts).
//
// Uprobes are per file: every process that maps this file takes the trap on
// these functions, the followed-pid lookup comes after (followedPids.ts). The
// send probe runs for every socket send on the node and leaves at that lookup.
import { ANNOUNCE, FOLLOWED, renderUprobeProgram, type FollowedPidsOptions } from "../probe/followedPids.ts";
import { TCP_STATE } from "../../vocabulary/tcpStates.ts";

/**
 * The smallest SSL_read that is an answer: the socket path's 96-byte data
 * segment less a TLS 1.3 record's 22 bytes. What an HTTP/2 server writes on
 * its own (SETTINGS, WINDOW_UPDATE, SETTINGS ACK, PING: 9 to 46 bytes of
 * plaintext from Go's) stays below it; an apiserver's response headers alone
 * are over 200 bytes.
 */
export const TLS_ANSWER_MIN_BYTES = 74;

/** Where the program learns an SSL object's socket: its first TCP send inside an SSL call (Linux 6.3+). */
export const TLS_TRACEPOINT = "sock/sock_send_length";

export interface TlsProbeTarget extends Omit<FollowedPidsOptions, "onThreadExit"> {
  /** What bpftrace attaches to: the OpenSSL file through a path that outlives its processes, e.g. /proc/<agent>/fd/12. */
  library: string;
}

/**
 * $ssl is asked to write $n plaintext bytes: a request starts, or goes on, on
 * its socket; they count as pending until written. Not on a socket that has
 * closed (a client writing into a dead connection): nothing would print or
 * delete what it left.
 */
const WRITING = `
	$sk = @tls_sk[pid, $ssl];
	if ($sk != 0 && $n > 0 && @tls_alive[$sk] != 0) {
		if (@tls_owner[$sk] == 0) {
			@tls_owner[$sk] = (uint64)pid;
		}
		if (@tls_since[$sk] == 0) {
			@tls_since[$sk] = nsecs;
		}
		@tls_pending[$sk] = $n;
	}`;

/**
 * $ssl wrote $n plaintext bytes (0: the write has not succeeded, and stays
 * pending). Counted only on this process's socket while it lives: a server
 * that resets as soon as it has read a request can close the socket between
 * the kernel's send and this return, its close has printed the bytes as
 * pending, and bytes added now would wait under the dead socket's address for
 * the next socket the kernel puts there (a later client's loss counted with
 * this one's body).
 */
const WROTE = `
	$sk = @tls_sk[pid, $ssl];
	if ($sk != 0 && $n > 0) {
		if (@tls_alive[$sk] != 0 && @tls_owner[$sk] == (uint64)pid) {
			@tls_bytes[$sk] = @tls_bytes[$sk] + $n;
			delete(@tls_pending[$sk]);
		}
	}`;

/** $ssl handed its caller $n plaintext bytes: an answer when large enough (a write still pending is the next request's); on a closed socket, nothing left to answer. */
const READ = `
		if ($n >= ${TLS_ANSWER_MIN_BYTES}) {
			$sk = @tls_sk[pid, $ssl];
			if ($sk != 0 && @tls_alive[$sk] != 0) {
				delete(@tls_bytes[$sk]);
				if (@tls_pending[$sk] == 0) {
					delete(@tls_since[$sk]);
				}
			}
		}`;

/** The program text; bpftrace runs it as `bpftrace -f json FILE AGENT_PID`. */
export function renderTlsProgram(target: TlsProbeTarget): string {
  if (/["\s:]/.test(target.library)) throw new RangeError(`TLS probe library path must not hold quotes, spaces or colons: "${target.library}"`);
  const lib = target.library;
  const probes = [
    // The thread's SSL now: its next TCP send belongs to this SSL's socket, if
    // that is not known yet. A process's first call announces that it is followed.
    `uprobe:${lib}:SSL_do_handshake /${FOLLOWED}/ {${ANNOUNCE}\n\t@tls_cur[pid, tid] = arg0;\n}`,
    `uprobe:${lib}:SSL_read /${FOLLOWED}/ {${ANNOUNCE}\n\t@tls_cur[pid, tid] = arg0;\n\t@tls_rd[pid, tid] = arg0;\n}`,
    `uretprobe:${lib}:SSL_read /${FOLLOWED}/ {\n\t$ssl = @tls_rd[pid, tid];\n\tdelete(@tls_rd[pid, tid]);\n\t$n = (int64)(int32)retval;${READ}\n}`,
    // SSL_read_ex(ssl, buf, num, size_t *readbytes) returns 1 on success.
    `uprobe:${lib}:SSL_read_ex /${FOLLOWED}/ {${ANNOUNCE}\n\t@tls_cur[pid, tid] = arg0;\n\t@tls_rd[pid, tid] = arg0;\n\t@tls_rdn[pid, tid] = arg3;\n}`,
    `uretprobe:${lib}:SSL_read_ex /${FOLLOWED}/ {\n\t$ssl = @tls_rd[pid, tid];\n\t$p = @tls_rdn[pid, tid];\n\tdelete(@tls_rd[pid, tid]);\n\tdelete(@tls_rdn[pid, tid]);\n\t$n = (int64)0;\n\tif ((int32)retval == 1 && $p != 0) {\n\t\t$n = (int64)*(uint64 *)$p;\n\t}${READ}\n}`,
    // SSL_write(ssl, buf, int num) returns the bytes written, or <= 0; a num below 1 is an error, no request.
    `uprobe:${lib}:SSL_write /${FOLLOWED}/ {${ANNOUNCE}\n\t@tls_cur[pid, tid] = arg0;\n\t@tls_wr[pid, tid] = arg0;\n\t$ssl = arg0;\n\t$n = (uint64)0;\n\tif ((int32)arg2 > 0) {\n\t\t$n = (uint64)(int32)arg2;\n\t}${WRITING}\n}`,
    `uretprobe:${lib}:SSL_write /${FOLLOWED}/ {\n\t$ssl = @tls_wr[pid, tid];\n\tdelete(@tls_wr[pid, tid]);\n\t$n = (uint64)0;\n\tif ((int32)retval > 0) {\n\t\t$n = (uint64)(int32)retval;\n\t}${WROTE}\n}`,
    // SSL_write_ex(ssl, buf, size_t num, size_t *written) returns 1 on success.
    `uprobe:${lib}:SSL_write_ex /${FOLLOWED}/ {${ANNOUNCE}\n\t@tls_cur[pid, tid] = arg0;\n\t@tls_wr[pid, tid] = arg0;\n\t@tls_wrn[pid, tid] = arg3;\n\t$ssl = arg0;\n\t$n = (uint64)arg2;${WRITING}\n}`,
    `uretprobe:${lib}:SSL_write_ex /${FOLLOWED}/ {\n\t$ssl = @tls_wr[pid, tid];\n\t$p = @tls_wrn[pid, tid];\n\tdelete(@tls_wr[pid, tid]);\n\tdelete(@tls_wrn[pid, tid]);\n\t$n = (uint64)0;\n\tif ((int32)retval == 1 && $p != 0) {\n\t\t$n = *(uint64 *)$p;\n\t}${WROTE}\n}`,
    // The caller asks why a read failed: SSL_ERROR_ZERO_RETURN (6) is the
    // server's close_notify, read. The client's own close that follows it
    // answers the server's; the server ended the connection.
    `uprobe:${lib}:SSL_get_error /${FOLLOWED}/ {\n\t@tls_ge[pid, tid] = arg0;\n}`,
    `uretprobe:${lib}:SSL_get_error /${FOLLOWED}/ {\n\t$ssl = @tls_ge[pid, tid];\n\tdelete(@tls_ge[pid, tid]);\n\tif ((int32)retval == 6) {\n\t\t$sk = @tls_sk[pid, $ssl];\n\t\tif ($sk != 0) {\n\t\t\t@tls_peer_closed[$sk] = 1;\n\t\t}\n\t}\n}`,
    // A freed SSL's address may be the next one's.
    `uprobe:${lib}:SSL_free /${FOLLOWED}/ {\n\tdelete(@tls_sk[pid, arg0]);\n\t$cur = @tls_cur[pid, tid];\n\tif ($cur == arg0) {\n\t\tdelete(@tls_cur[pid, tid]);\n\t}\n}`,
    // bpftrace 0.17's verifier rejects a read of args after a branch: copy them first.
    `tracepoint:${TLS_TRACEPOINT.replace("/", ":")} /${FOLLOWED}/ {\n\t$skp = (uint64)args->sk;\n\t$protocol = args->protocol;\n\t$ssl = (uint64)@tls_cur[pid, tid];\n\tif ($ssl != 0 && $protocol == 6) {\n\t\tif (@tls_sk[pid, $ssl] == 0) {\n\t\t\t@tls_sk[pid, $ssl] = $skp;\n\t\t\t@tls_alive[$skp] = 1;\n\t\t}\n\t}\n}`,
    // A followed socket reached CLOSE (in any context: a reset is handled in softirq).
    `tracepoint:sock:inet_sock_set_state {\n\t$skp = (uint64)args->skaddr;\n\t$new = args->newstate;\n\t$protocol = args->protocol;\n\tif ($new == ${TCP_STATE.CLOSE} && $protocol == 6) {\n\t\tdelete(@tls_alive[$skp]);\n\t\t$owner = @tls_owner[$skp];\n\t\tif ($owner != 0) {\n\t\t\t$since = @tls_since[$skp];\n\t\t\t$waited = (uint64)0;\n\t\t\tif ($since != 0) {\n\t\t\t\t$waited = nsecs - $since;\n\t\t\t}\n\t\t\tprintf("tls_close %llu %d %llu %d %llu %d\\n", nsecs, $owner, $skp, @tls_bytes[$skp] + @tls_pending[$skp], $waited, @tls_peer_closed[$skp]);\n\t\t\tdelete(@tls_owner[$skp]);\n\t\t\tdelete(@tls_pending[$skp]);\n\t\t\tdelete(@tls_peer_closed[$skp]);\n\t\t\tdelete(@tls_since[$skp]);\n\t\t\tdelete(@tls_bytes[$skp]);\n\t\t}\n\t}\n}`,
  ];
  return renderUprobeProgram({
    comment: ["// Generated by lostwrite for one OpenSSL: see agent/src/sources/tls/tlsProbeProgram.ts.", `// Program ${target.programId}.`],
    follow: {
      ...target,
      // A thread leaving: its per-thread entries go with it.
      onThreadExit: `\n\tdelete(@tls_cur[pid, tid]);\n\tdelete(@tls_rd[pid, tid]);\n\tdelete(@tls_rdn[pid, tid]);\n\tdelete(@tls_wr[pid, tid]);\n\tdelete(@tls_wrn[pid, tid]);\n\tdelete(@tls_ge[pid, tid]);`,
    },
    probes,
    end: "clear(@tls_cur); clear(@tls_rd); clear(@tls_rdn); clear(@tls_wr); clear(@tls_wrn);\n\tclear(@tls_ge);\n\tclear(@tls_sk); clear(@tls_owner); clear(@tls_since); clear(@tls_bytes); clear(@tls_pending); clear(@tls_alive); clear(@tls_peer_closed);",
  });
}
