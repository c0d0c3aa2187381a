import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { GoConnectionSockets, type GoConnectionSocket } from "../../../../src/sources/probe/adoptedConnections.ts";

const connection = (pid: number, conn: number): GoConnectionSocket => ({ pid, conn: BigInt(conn), sk: 0xffff_8881_0000_0000n + BigInt(conn), task: 0xffff_8882_0000_0000n + BigInt(pid) });

describe("the Go operators' connection sockets", { timeout: 10_000 }, () => {
  it("tells of each connection as it is found and lists the live ones, of a process or all", () => {
    const told: GoConnectionSocket[] = [];
    const sockets = new GoConnectionSockets(() => assert.fail("nothing dropped"));
    sockets.onFound((c) => told.push(c));
    sockets.found(connection(7, 1));
    sockets.found(connection(7, 2));
    sockets.found(connection(9, 3));
    assert.deepEqual(told, [connection(7, 1), connection(7, 2), connection(9, 3)]);
    assert.deepEqual(sockets.list(7), [connection(7, 1), connection(7, 2)]);
    assert.deepEqual(sockets.list(), [connection(7, 1), connection(7, 2), connection(9, 3)]);
  });

  it("forgets a connection at its end, and a process's all with it", () => {
    const sockets = new GoConnectionSockets(() => assert.fail("nothing dropped"));
    for (const [pid, conn] of [[7, 1], [7, 2], [9, 3]] as const) sockets.found(connection(pid, conn));
    sockets.closed(7, 1n);
    assert.deepEqual(sockets.list(), [connection(7, 2), connection(9, 3)]);
    sockets.forgetProcess(7);
    assert.deepEqual(sockets.list(), [connection(9, 3)]);
    // Another process's connection at the same Go address is its own.
    sockets.closed(7, 3n);
    assert.deepEqual(sockets.list(), [connection(9, 3)]);
  });

  it("keeps one entry per connection found again (a Go program restarted looks it up again), and counts what it forgets past its capacity", () => {
    let dropped = 0;
    const sockets = new GoConnectionSockets(() => dropped++, 2);
    sockets.found(connection(7, 1));
    sockets.found(connection(7, 1));
    assert.equal(sockets.list().length, 1);
    sockets.found(connection(7, 2));
    sockets.found(connection(7, 3));
    assert.equal(dropped, 1);
    assert.deepEqual(sockets.list(), [connection(7, 2), connection(7, 3)]);
  });
});
