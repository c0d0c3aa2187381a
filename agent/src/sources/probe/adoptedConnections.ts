// The apiserver connections of Go operators followed per request, as their
// Go programs found the sockets (go_conn_sk lines, one per connection, at its
// first request). The socket probe adopts each (control op 12, ADOPTED
// CONNECTIONS in probes/apiserver_sockets.bt): without its send hook it
// learns a connection only at connect, so one opened before the program
// started would go unfollowed (its retransmits, resets, closes and bytes),
// and a restart, to drop the hook or after a crash, would forget them all.
// Every new instance of the socket probe is told them again; a connection
// leaves at its end (go_conn_closed) or with its process.
import { BoundedMap } from "../../boundedMap.ts";

export interface GoConnectionSocket {
  pid: number;
  /** Go's *ClientConn: the connection's key in the Go program's lines. */
  conn: bigint;
  /** The struct sock's address. */
  sk: bigint;
  /** The task_struct's address of the thread that found it: the socket probe checks it is `pid`'s, and names the owner from it. */
  task: bigint;
}

/** Far more than the apiserver connections of the Go operators of one node. */
const DEFAULT_CAPACITY = 4096;

export class GoConnectionSockets {
  readonly #byKey: BoundedMap<string, GoConnectionSocket>;
  #listener: (connection: GoConnectionSocket) => void = () => {};

  /** `dropped` is told of a connection forgotten to keep within capacity (the oldest). */
  constructor(dropped: () => void, capacity = DEFAULT_CAPACITY) {
    this.#byKey = new BoundedMap(capacity, dropped);
  }

  /** Told of each connection as it is found. */
  onFound(listener: (connection: GoConnectionSocket) => void): void {
    this.#listener = listener;
  }

  found(connection: GoConnectionSocket): void {
    this.#byKey.set(`${connection.pid}:${connection.conn}`, connection);
    this.#listener(connection);
  }

  closed(pid: number, conn: bigint): void {
    this.#byKey.delete(`${pid}:${conn}`);
  }

  forgetProcess(pid: number): void {
    for (const [key, connection] of this.#byKey) if (connection.pid === pid) this.#byKey.delete(key);
  }

  /** The live connections, of one process or of all. */
  list(pid?: number): GoConnectionSocket[] {
    return [...this.#byKey.values()].filter((connection) => pid === undefined || connection.pid === pid);
  }
}
