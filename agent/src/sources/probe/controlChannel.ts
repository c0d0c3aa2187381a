// The agent's way to change the running probe's in-kernel target and endpoint
// maps without restarting bpftrace and without a syscall tracepoint (which
// would slow every syscall on the node). The probe reads the LENGTHS of UDP
// datagrams the agent sends from its own pid to 127.0.0.1:<port>; see the
// header of probes/apiserver_sockets.bt for the protocol.
import dgram from "node:dgram";
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
} as const;
export type ControlOp = (typeof ControlOp)[keyof typeof ControlOp];

const OP_BASE = 8192;
const WORD_BITS = 12n;
const WORD_MASK = (1n << WORD_BITS) - 1n;

/** Words of 12 bits, most significant first, as the probe accumulates them. */
function words(value: bigint, count: number): number[] {
  if (value < 0n || value >= 1n << (WORD_BITS * BigInt(count))) {
    throw new RangeError(`control value ${value} does not fit in ${count} words`);
  }
  const out: number[] = [];
  for (let i = count - 1; i >= 0; i--) out.push(Number((value >> (WORD_BITS * BigInt(i))) & WORD_MASK));
  return out;
}

/** The datagram lengths that carry one control message. */
export function encodeControl(op: ControlOp, a: bigint, b = 0n, c = 0n): number[] {
  return [OP_BASE + op, ...words(a, 6), ...words(b, 6), ...words(c, 2)];
}

/** A counter entry keyed pid, syscall number, errno: what ops 9 and 10 delete. */
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
 * A connected UDP socket to the agent's own listener on loopback. The listener
 * exists so every send succeeds (an unreachable port would turn the next send
 * into ECONNREFUSED, and the probe would read an error instead of a length).
 */
export class ControlChannel {
  private readonly receiver = dgram.createSocket("udp4");
  private readonly sender = dgram.createSocket("udp4");
  private chain: Promise<void> = Promise.resolve();
  private readonly zeros = Buffer.alloc(OP_BASE + 16);
  port = 0;

  async open(): Promise<void> {
    this.receiver.on("message", () => undefined); // drained and discarded
    await new Promise<void>((resolve, reject) => {
      this.receiver.once("error", reject);
      this.receiver.bind(0, "127.0.0.1", () => resolve());
    });
    this.port = this.receiver.address().port;
    // Send errors reach the send callback; anything else on these sockets must
    // not become an unhandled 'error' event that stops the agent.
    this.receiver.on("error", () => undefined);
    await new Promise<void>((resolve, reject) => {
      this.sender.once("error", reject);
      this.sender.connect(this.port, "127.0.0.1", () => resolve());
    });
    this.sender.on("error", () => undefined);
  }

  /** Sends messages in order; a message never interleaves with another. */
  send(lengths: number[]): Promise<void> {
    const run = async (): Promise<void> => {
      for (const length of lengths) {
        await new Promise<void>((resolve, reject) =>
          this.sender.send(this.zeros.subarray(0, length), (err) => (err ? reject(err) : resolve())),
        );
      }
    };
    const next = this.chain.then(run);
    this.chain = next.catch(() => undefined);
    return next;
  }

  close(): void {
    this.sender.close();
    this.receiver.close();
  }
}
