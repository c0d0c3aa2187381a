// Who ended a connection, as the socket probe's close line says it (its
// CLOSED_BY field, probes/apiserver_sockets.bt): the target is the client,
// the operator; the apiserver is the server. One vocabulary for every reader
// of that line, so that "1" and "2" are spelt once.
export const CLOSED_BY = {
  unknown: 0,
  target: 1,
  apiserver: 2,
} as const;
