import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SOCKET_SYSCALLS, SYSCALL_LABELS, syscallName } from "../../../src/vocabulary/syscalls.ts";

describe("socket syscalls", { timeout: 10_000 }, () => {
  it("names the x86_64 numbers the probes read from pt_regs", () => {
    assert.equal(syscallName(1), "write");
    assert.equal(syscallName(20), "writev");
    assert.equal(syscallName(42), "connect");
    assert.equal(syscallName(44), "sendto");
    assert.equal(syscallName(46), "sendmsg");
    assert.equal(syscallName(307), "sendmmsg");
  });

  it("calls any other number unknown, a value of the label's closed set", () => {
    assert.equal(syscallName(0), "unknown");
    assert.equal(syscallName(-1), "unknown");
    assert.ok(SYSCALL_LABELS.includes("unknown"));
  });

  it("has one label per syscall and one number per name", () => {
    assert.deepEqual(SYSCALL_LABELS.slice(0, -1), Object.keys(SOCKET_SYSCALLS));
    assert.equal(new Set(Object.values(SOCKET_SYSCALLS)).size, Object.keys(SOCKET_SYSCALLS).length);
  });
});
