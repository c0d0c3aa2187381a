// The kernel's TCP states (include/net/tcp_states.h), as the probes read them
// from sock:inet_sock_set_state and a socket's skc_state: named once, so that
// no program or judge compares against a bare number.
export const TCP_STATE = {
  ESTABLISHED: 1,
  SYN_SENT: 2,
  SYN_RECV: 3,
  FIN_WAIT1: 4,
  FIN_WAIT2: 5,
  TIME_WAIT: 6,
  CLOSE: 7,
  CLOSE_WAIT: 8,
  LAST_ACK: 9,
  LISTEN: 10,
  CLOSING: 11,
  NEW_SYN_RECV: 12,
} as const;
