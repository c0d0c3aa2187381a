// What each probe variant takes for the answer to a request written on an
// apiserver socket; exported as a label of lostwrite_probe_info, so the
// weaker rule is visible where the verdicts are read.
import type { ProbeVariant } from "../sources/probe/probeProgram.ts";

export const ANSWER_RULES = {
  // A data segment of at least 96 bytes arrived after the request: TLS
  // alerts and an HTTP/2 server's own SETTINGS, WINDOW_UPDATE or PING do not
  // answer it.
  sockets: "segment_after_request",
  // Any read of any size by the target: on an HTTP/2 connection, where watch
  // events keep arriving, a request is never unanswered for long, so a death
  // with a request in flight is mostly reported only when a write fails.
  syscalls: "any_read",
} as const satisfies Record<ProbeVariant, string>;

