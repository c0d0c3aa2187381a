// A follow message travels in the two addresses of one refused connect: what
// the agent encodes, the uprobe program decodes (its arithmetic is rendered
// from the same constants: followedPids.ts), for every pid Linux can give
// and every program id.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { decodeFollow, encodeFollow, EVERY_PROGRAM, FollowChannel, FollowOp, MAX_PROGRAM_ID } from "../../../../src/sources/probe/followChannel.ts";
import { renderFollowedPids } from "../../../../src/sources/probe/followedPids.ts";

/** What the rendered program computes from the two addresses as the kernel stores them (network order, read little-endian). */
function asTheProgramReads(local: string, remote: string): { op: number; programId: number; pid: number } {
  const stored = (quad: string): number => {
    const [a, b, c, d] = quad.split(".").map(Number) as [number, number, number, number];
    return (a | (b << 8) | (c << 16) | (d << 24)) >>> 0;
  };
  const src = stored(local);
  const dst = stored(remote);
  assert.equal(src & 0xffff, 0xfe7f);
  assert.equal(dst & 0xffff, 0xfe7f);
  const word = ((((src >>> 16) & 0xff) << 24) | (((src >>> 24) & 0xff) << 16) | (((dst >>> 16) & 0xff) << 8) | ((dst >>> 24) & 0xff)) >>> 0;
  return { op: word >>> 30, programId: (word >>> 22) & 0xff, pid: word & 0x3fffff };
}

void describe("follow messages", { timeout: 10_000 }, () => {
  void it("carry op, program and pid in 127.254.0.0/16, both ways, for the extremes", () => {
    for (const op of [FollowOp.follow, FollowOp.unfollow]) {
      for (const programId of [0, 1, MAX_PROGRAM_ID, EVERY_PROGRAM]) {
        for (const pid of [1, 255, 256, 65_535, 65_536, 4_194_303]) {
          const addresses = encodeFollow(op, programId, pid);
          assert.match(addresses.local, /^127\.254\.\d+\.\d+$/);
          assert.match(addresses.remote, /^127\.254\.\d+\.\d+$/);
          assert.deepEqual(decodeFollow(addresses), { op, programId, pid });
          assert.deepEqual(asTheProgramReads(addresses.local, addresses.remote), { op, programId, pid });
        }
      }
    }
  });

  void it("carry a beat request to one program or every one, naming no process", () => {
    for (const programId of [0, MAX_PROGRAM_ID, EVERY_PROGRAM]) {
      const addresses = encodeFollow(FollowOp.beat, programId, 0);
      assert.deepEqual(asTheProgramReads(addresses.local, addresses.remote), { op: FollowOp.beat, programId, pid: 0 });
    }
    const text = renderFollowedPids({ programId: 7, pids: [], execWatch: false }).probes.join("\n");
    assert.match(text, /if \(\$op == 3\) \{\s*printf\("beat %llu\\n", nsecs\);/, text);
  });

  void it("the program's rendered arithmetic is the one above", () => {
    const text = renderFollowedPids({ programId: 7, pids: [], execWatch: false }).probes.join("\n");
    assert.ok(text.includes("(($src & 0xffff) == 0xfe7f && ($dst & 0xffff) == 0xfe7f)"), text);
    assert.ok(text.includes("$word = (((($src >> 16) & 0xff) << 24) | ((($src >> 24) & 0xff) << 16) | ((($dst >> 16) & 0xff) << 8) | (($dst >> 24) & 0xff));"), text);
    assert.ok(text.includes("if ($program == 7 || $program == 255) {"), text);
  });

  void it("refuse what they cannot carry, naming the value", () => {
    assert.throws(() => encodeFollow(FollowOp.follow, 0, 0), /pid: expected 1…4194303, got 0/);
    assert.throws(() => encodeFollow(FollowOp.follow, 0, 4_194_304), /got 4194304/);
    assert.throws(() => encodeFollow(FollowOp.follow, 256, 1), /program id: expected 0…255, got 256/);
    assert.throws(() => encodeFollow(FollowOp.beat, 0, 4242), /a beat names no process \(0\), got 4242/);
    assert.equal(decodeFollow({ local: "127.0.0.1", remote: "127.254.0.1" }), null);
  });

  void it("are sent as connects the kernel refuses at once, in order, with ids given out and taken back", async () => {
    const channel = new FollowChannel();
    await channel.open();
    try {
      await Promise.all([channel.send(FollowOp.follow, 3, 4242), channel.send(FollowOp.unfollow, EVERY_PROGRAM, 4242)]);
      const first = channel.allocate();
      const second = channel.allocate();
      assert.deepEqual([first, second], [0, 1]);
      channel.release(first!);
      const ids = Array.from({ length: MAX_PROGRAM_ID }, () => channel.allocate());
      assert.equal(ids.at(-1), 0, "a released id comes back last");
      assert.equal(channel.allocate(), null, "every id taken");
    } finally {
      channel.close();
    }
  });

  void it("render the initial pids followed from BEGIN, each announced", () => {
    const rendered = renderFollowedPids({ programId: 2, pids: [42, 7, 42], execWatch: true });
    assert.match(rendered.begin, /^@lw_exec_watch = 1;/);
    assert.deepEqual([...rendered.begin.matchAll(/@lw_pids\[\(uint64\)(\d+)\] = nsecs;/g)].map((m) => Number(m[1])), [7, 42]);
    assert.equal([...rendered.begin.matchAll(/printf\("follow /g)].length, 2);
    assert.throws(() => renderFollowedPids({ programId: 255, pids: [], execWatch: false }), /expected 0…254, got 255/);
    assert.throws(() => renderFollowedPids({ programId: 0, pids: [0], execWatch: false }), /positive integer, got 0/);
  });
});
