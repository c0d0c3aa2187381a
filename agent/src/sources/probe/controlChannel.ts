// The agent's way to change the running probe's in-kernel target and endpoint
// maps without restarting bpftrace, without a syscall tracepoint (which would
// slow every syscall on the node) and without the per-send tracepoint (which
// the agent leaves unattached whenever no target needs it). As the follow
// channel of the uprobe programs (followChannel.ts), a message rides on TCP
// connects, which the probe sees on sock:inet_sock_set_state: the connect's
// CLOSE -> SYN_SENT transition runs in the caller's context with both
// addresses of the socket set. One connect from the agent, from 127.253.A.B to
// 127.253.C.D:<port>, carries one word of 32 bits, A.B the high half; the
// port is the agent's own listener on 127.0.0.1, so nobody listens on the
// destination address and every such connect is refused at once on loopback,
// reaching nobody. See CONTROL CHANNEL in probes/apiserver_sockets.bt for how
// the probe accumulates the words into a message.
import net from "node:net";
import type { EndpointKey } from "./endpointKey.ts";

export const ControlOp = {
  addTarget: 1,
  removeTarget: 2,
  addEndpoint4: 3,
  removeEndpoint4: 4,
  addEndpoint6: 5,
  removeEndpoint6: 6,
  forgetCounters: 7,
  ack: 8,
  /** c = 1: the target's requests are read by the Go probe, its sends are left alone; c = 0: no longer. */
  requestLevel: 9,
  forgetTransient: 10,
  forgetFailedSends: 11,
  /** a: a socket's address, b: the task that found it, c: its pid (a request-level target's connection; the sockets variant only). */
  adoptConnection: 12,
} as const;
export type ControlOp = (typeof ControlOp)[keyof typeof ControlOp];

/** A word at or above this starts a message (op = word - OP_BASE); words below carry 24 bits of data. */
export const OP_BASE = 0x8000_0000;
const WORD_BITS = 24n;
const WORD_MASK = (1n << WORD_BITS) - 1n;
/** a and b take 3 words each (72 bits: a u64 with room), c one (24 bits: a port, an errno, a flag). */
const CONTROL_WORDS = { a: 3, b: 3, c: 1 } as const;

/** The second byte of every control address (127.253.x.y); the follow channel's is 254. */
export const CONTROL_NET_BYTE = 253;

/** Words of 24 bits, most significant first, as the probe accumulates them. */
function words(value: bigint, count: number): number[] {
  if (value < 0n || value >= 1n << (WORD_BITS * BigInt(count))) {
    throw new RangeError(`control value ${value} does not fit in ${count} words of ${WORD_BITS} bits`);
  }
  const out: number[] = [];
  for (let i = count - 1; i >= 0; i--) out.push(Number((value >> (WORD_BITS * BigInt(i))) & WORD_MASK));
  return out;
}

/** The words (one connect each) that carry one control message. */
export function encodeControl(op: ControlOp, a: bigint, b = 0n, c = 0n): number[] {
  return [OP_BASE + op, ...words(a, CONTROL_WORDS.a), ...words(b, CONTROL_WORDS.b), ...words(c, CONTROL_WORDS.c)];
}

/** The source and destination addresses that carry one word. */
export function controlAddresses(word: number): { local: string; remote: string } {
  if (!Number.isInteger(word) || word < 0 || word > 0xffff_ffff) throw new RangeError(`control word: expected 0…${0xffff_ffff}, got ${word}`);
  const quad = (half: number): string => `127.${CONTROL_NET_BYTE}.${(half >>> 8) & 0xff}.${half & 0xff}`;
  return { local: quad(word >>> 16), remote: quad(word & 0xffff) };
}

/** A counter entry keyed pid, syscall number, errno: what ops 10 and 11 delete. */
export interface SyscallCounterKey {
  map: "transient" | "failedSends";
  pid: number;
  /** The syscall number; -1 where the probe could not read it. */
  nr: number;
  errno: number;
}

/** Deletes one @transient or @failed_sends entry; the syscall number goes as 64 bits, two's complement. */
export function forgetSyscallCounterMessage(key: SyscallCounterKey): number[] {
  const op = key.map === "transient" ? ControlOp.forgetTransient : ControlOp.forgetFailedSends;
  return encodeControl(op, BigInt(key.pid), BigInt.asUintN(64, BigInt(key.nr)), BigInt(key.errno));
}

export function endpointMessage(add: boolean, key: EndpointKey): number[] {
  if (key.family === 4) {
    return encodeControl(add ? ControlOp.addEndpoint4 : ControlOp.removeEndpoint4, key.addr, 0n, BigInt(key.port));
  }
  return encodeControl(add ? ControlOp.addEndpoint6 : ControlOp.removeEndpoint6, key.hi, key.lo, BigInt(key.port));
}

/**
 * The agent's listener on 127.0.0.1 (its port is the probe's CONTROL_PORT)
 * and the connects that carry words to the probe, one at a time, in order:
 * each resolves once refused, by which time the probe has seen it.
 */
export class ControlChannel {
  readonly #listener = net.createServer((socket) => socket.destroy());
  #chain: Promise<void> = Promise.resolve();
  port = 0;

  async open(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.#listener.once("error", reject);
      this.#listener.listen(0, "127.0.0.1", () => resolve());
    });
    // Anything on the listener after it is up must not become an unhandled
    // 'error' event that stops the agent.
    this.#listener.on("error", () => undefined);
    this.port = (this.#listener.address() as net.AddressInfo).port;
  }

  /** Sends messages' words in order; a message never interleaves with another. */
  send(words: number[]): Promise<void> {
    const run = async (): Promise<void> => {
      for (const word of words) await this.#connect(word);
    };
    const next = this.#chain.then(run);
    this.#chain = next.catch(() => undefined);
    return next;
  }

  #connect(word: number): Promise<void> {
    const { local, remote } = controlAddresses(word);
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host: remote, port: this.port, localAddress: local });
      socket.once("connect", () => {
        // Not expected (nothing listens there); the word was seen all the same.
        socket.destroy();
        resolve();
      });
      socket.once("error", (error: NodeJS.ErrnoException) => (error.code === "ECONNREFUSED" ? resolve() : reject(error)));
    });
  }

  close(): void {
    this.#listener.close();
  }
}
