// The agent's way to tell a running uprobe program (Go requests, TLS answers)
// which processes to follow, without restarting it. bpftrace 0.17 takes no
// map updates from user space, and a per-send tracepoint is a hook a Go
// program must not pay for (the socket probe's control channel rides on
// connects too, on 127.253: controlChannel.ts). A TCP connect is seen on a tracepoint every uprobe program can afford
// (sock:inet_sock_set_state fires per state change, not per send): the
// connect's CLOSE -> SYN_SENT transition runs in the caller's context, with
// both addresses of the socket set. So a message is one connect from the
// agent, from 127.254.A.B to 127.254.C.D, whose four bytes carry it:
//
//   bits 31-30  op: 1 follow, 2 stop following, 3 print a `beat` line now
//   bits 29-22  the program it is for (its id; 255: every program)
//   bits 21-0   the host pid (0 for a beat)
//
// The destination port is the agent's own listener on 127.0.0.1, so no other
// process listens there on any address: every such connect is refused at
// once by a reset, on loopback, and reaches nobody.
import net from "node:net";

export const FollowOp = { follow: 1, unfollow: 2, beat: 3 } as const;
export type FollowOp = (typeof FollowOp)[keyof typeof FollowOp];

/** The program id every uprobe program applies. */
export const EVERY_PROGRAM = 255;
/** Program ids a follow message can name: 0…254. */
export const MAX_PROGRAM_ID = 254;
/** Linux's largest pid_max. */
const PID_LIMIT = 1 << 22;

/** The second byte of every follow address (127.254.x.y). */
export const FOLLOW_NET_BYTE = 254;

interface FollowAddresses {
  /** Source and destination, dotted quads in 127.254.0.0/16. */
  local: string;
  remote: string;
}

/** The two addresses that carry one message. */
export function encodeFollow(op: FollowOp, programId: number, pid: number): FollowAddresses {
  if (op === FollowOp.beat) {
    if (pid !== 0) throw new RangeError(`follow message pid: a beat names no process (0), got ${pid}`);
  } else if (!Number.isInteger(pid) || pid <= 0 || pid >= PID_LIMIT) {
    throw new RangeError(`follow message pid: expected 1…${PID_LIMIT - 1}, got ${pid}`);
  }
  if (!Number.isInteger(programId) || programId < 0 || programId > EVERY_PROGRAM) {
    throw new RangeError(`follow message program id: expected 0…${EVERY_PROGRAM}, got ${programId}`);
  }
  const word = ((op << 30) | (programId << 22) | pid) >>> 0;
  const quad = (half: number): string => `127.${FOLLOW_NET_BYTE}.${(half >>> 8) & 0xff}.${half & 0xff}`;
  return { local: quad(word >>> 16), remote: quad(word & 0xffff) };
}

/** The message two addresses carry, as a program reads it; null for addresses outside 127.254.0.0/16. */
export function decodeFollow({ local, remote }: FollowAddresses): { op: number; programId: number; pid: number } | null {
  const half = (quad: string): number | null => {
    const bytes = quad.split(".").map(Number);
    if (bytes.length !== 4 || bytes[0] !== 127 || bytes[1] !== FOLLOW_NET_BYTE) return null;
    return (bytes[2]! << 8) | bytes[3]!;
  };
  const high = half(local);
  const low = half(remote);
  if (high === null || low === null) return null;
  const word = ((high << 16) | low) >>> 0;
  return { op: word >>> 30, programId: (word >>> 22) & 0xff, pid: word & (PID_LIMIT - 1) };
}

/** Sends follow messages, one connect each, in order. */
export class FollowChannel {
  readonly #listener = net.createServer((socket) => socket.destroy());
  #port = 0;
  #chain: Promise<void> = Promise.resolve();
  readonly #free = Array.from({ length: MAX_PROGRAM_ID + 1 }, (_, id) => id);

  /** An id for a new program; null when every id is taken. */
  allocate(): number | null {
    return this.#free.shift() ?? null;
  }

  /** A stopped program's id, free again (after the others: a late message for it then finds no program). */
  release(id: number): void {
    if (id >= 0 && id <= MAX_PROGRAM_ID && !this.#free.includes(id)) this.#free.push(id);
  }

  async open(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.#listener.once("error", reject);
      this.#listener.listen(0, "127.0.0.1", () => resolve());
    });
    this.#listener.on("error", () => undefined);
    this.#port = (this.#listener.address() as net.AddressInfo).port;
  }

  /** Resolves once the program had its chance to see it: the connect was refused (or failed some other way, logged by the caller). */
  send(op: FollowOp, programId: number, pid: number): Promise<void> {
    const { local, remote } = encodeFollow(op, programId, pid);
    const run = (): Promise<void> =>
      new Promise((resolve, reject) => {
        const socket = net.connect({ host: remote, port: this.#port, localAddress: local });
        socket.once("connect", () => {
          // Not expected (nothing listens there); the message was seen all the same.
          socket.destroy();
          resolve();
        });
        socket.once("error", (error: NodeJS.ErrnoException) => (error.code === "ECONNREFUSED" ? resolve() : reject(error)));
      });
    const next = this.#chain.then(run);
    this.#chain = next.catch(() => undefined);
    return next;
  }

  close(): void {
    this.#listener.close();
  }
}
