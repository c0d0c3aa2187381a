// The control messages must decode in the kernel exactly as the probe
// accumulates them: op, then 3+3+1 words of 24 bits, most significant first,
// each word carried by the two addresses of one connect.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CONTROL_NET_BYTE, ControlOp, controlAddresses, encodeControl, endpointMessage, forgetSyscallCounterMessage, OP_BASE } from "../../../../src/sources/probe/controlChannel.ts";
import { FOLLOW_NET_BYTE } from "../../../../src/sources/probe/followChannel.ts";
import { endpointKey, kernelKeys, parseEndpoint } from "../../../../src/sources/probe/endpointKey.ts";

/** The word the probe reads from a connect's addresses, as it computes it from the kernel's u32s. */
function kernelWord(local: string, remote: string): number {
  // struct sock keeps an IPv4 address in network order; the probe loads it as a little-endian u32.
  const stored = (quad: string): number => {
    const [a, b, c, d] = quad.split(".").map(Number) as [number, number, number, number];
    return (a | (b << 8) | (c << 16) | (d << 24)) >>> 0;
  };
  const src = stored(local);
  const dst = stored(remote);
  assert.equal(src & 0xffff, 0xfd7f, `${local} is in 127.253.0.0/16`);
  assert.equal(dst & 0xffff, 0xfd7f, `${remote} is in 127.253.0.0/16`);
  return ((((src >>> 16) & 0xff) << 24) | (((src >>> 24) & 0xff) << 16) | (((dst >>> 16) & 0xff) << 8) | ((dst >>> 24) & 0xff)) >>> 0;
}

/** The probe's accumulator, written again in TypeScript, fed through the addresses that carry each word. */
function kernelDecode(message: number[]): { op: number; a: bigint; b: bigint; c: bigint } {
  const [first, ...words] = message.map((word) => {
    const { local, remote } = controlAddresses(word);
    return kernelWord(local, remote);
  });
  assert.ok(first! >= OP_BASE, "a message starts with an op");
  assert.equal(words.length, 7);
  let a = 0n, b = 0n, c = 0n;
  words.forEach((w, n) => {
    assert.ok(w >= 0 && w < 1 << 24, `word ${w} fits 24 bits`);
    if (n < 3) a = (a << 24n) | BigInt(w);
    else if (n < 6) b = (b << 24n) | BigInt(w);
    else c = (c << 24n) | BigInt(w);
  });
  return { op: first! - OP_BASE, a, b, c };
}

describe("control channel encoding", () => {
  it("names a failed-send or transient entry whole: pid, syscall number as 64 bits (-1 too), errno", () => {
    const decoded = kernelDecode(forgetSyscallCounterMessage({ map: "failedSends", pid: 4242, nr: -1, errno: 104 }));
    assert.deepEqual(decoded, { op: 11, a: 4242n, b: (1n << 64n) - 1n, c: 104n });
    // The probe casts b to int64, as the map's key holds the syscall number.
    assert.equal(BigInt.asIntN(64, decoded.b), -1n);
    assert.deepEqual(kernelDecode(forgetSyscallCounterMessage({ map: "transient", pid: 7, nr: 44, errno: 11 })), { op: 10, a: 7n, b: 44n, c: 11n });
  });

  it("carries a pid, and u64 halves of an IPv6 address, intact", () => {
    assert.deepEqual(kernelDecode(encodeControl(ControlOp.addTarget, 4194304n)), { op: 1, a: 4194304n, b: 0n, c: 0n });
    assert.deepEqual(kernelDecode(encodeControl(ControlOp.requestLevel, 4194304n, 0n, 1n)), { op: 9, a: 4194304n, b: 0n, c: 1n });
    const max = (1n << 64n) - 1n;
    assert.deepEqual(kernelDecode(encodeControl(ControlOp.addEndpoint6, max, 1n, 65535n)), { op: 5, a: max, b: 1n, c: 65535n });
  });

  it("refuses a value that does not fit its words", () => {
    assert.throws(() => encodeControl(ControlOp.addTarget, 1n << 72n), /does not fit/);
    assert.throws(() => encodeControl(ControlOp.addEndpoint4, 1n, 0n, 1n << 24n), /does not fit/);
  });

  it("uses addresses the uprobe programs' follow channel does not read", () => {
    assert.notEqual(CONTROL_NET_BYTE, FOLLOW_NET_BYTE);
    assert.deepEqual(controlAddresses(OP_BASE + ControlOp.ack), { local: "127.253.128.0", remote: "127.253.0.8" });
    assert.throws(() => controlAddresses(2 ** 32), /control word: expected 0…4294967295, got 4294967296/);
  });

  it("encodes endpoints as the kernel stores them", () => {
    const v4 = parseEndpoint("127.0.0.1:6443");
    // struct sock keeps the address in network order; loaded as a little-endian u32.
    assert.deepEqual(v4.family === 4 && [v4.addr, v4.port], [0x0100007fn, 6443]);
    assert.deepEqual(kernelDecode(endpointMessage(true, v4)), { op: 3, a: 0x0100007fn, b: 0n, c: 6443n });
    const v6 = parseEndpoint("[::1]:443");
    assert.ok(v6.family === 6);
    // ::1 is 15 zero bytes then 1; the last u32, loaded little-endian, is 0x01000000.
    assert.deepEqual([v6.hi, v6.lo, v6.text], [0n, 0x01000000n, "[::1]:443"]);
  });

  it("adds the v4-mapped IPv6 form of an IPv4 endpoint, for dual-stack sockets", () => {
    const keys = kernelKeys(endpointKey("10.96.0.1", 443));
    assert.deepEqual(keys.map((k) => k.text), ["10.96.0.1:443", "[::ffff:10.96.0.1]:443"]);
  });

  it("rejects endpoints that are not IP:PORT, naming the value", () => {
    assert.throws(() => parseEndpoint("kubernetes.default:443"), /"kubernetes.default" is not an IP address/);
    assert.throws(() => parseEndpoint("10.0.0.1:70000"), /port "70000"/);
    assert.throws(() => parseEndpoint("10.0.0.1"), /"10.0.0.1" is not HOST:PORT/);
  });
});
