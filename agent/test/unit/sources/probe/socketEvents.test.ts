// Kernel numbers become names, and a closed connection is judged: a request
// lost, an idle death, or a normal close.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ProbeRecord } from "../../../../src/sources/probe/probeOutput.ts";
import { judge } from "../../../../src/sources/probe/socketEvents.ts";
import { errnoName } from "../../../../src/vocabulary/errno.ts";
import type { UncertainClose } from "../../../../src/sources/tls/tlsAnswers.ts";

const close = (over: Partial<Extract<ProbeRecord, { type: "close" }>>): ProbeRecord => ({
  type: "close", ts: 10n, pid: 7, tid: 8, err: 0, reset: false, closedBy: 0, unansweredBytes: 0, waitedNs: 0n, retransmits: 0,
  port: 6443, addr: "10.0.0.1", sk: 0xffff0001n, comm: "manager", ...over,
});
const opts = { unansweredMinBytes: 64 };

describe("judge", () => {
  it("names errno and syscall of a failed send, and calls a zero-byte send by its cause", () => {
    const failed = judge({ type: "send", ts: 1n, pid: 7, tid: 8, syscallNr: 1, ret: -32, port: 443, addr: "fd00::1", sk: 1n, comm: "m" }, opts);
    assert.ok(failed.kind === "loss");
    assert.deepEqual([failed.event.cause, failed.event.errno, failed.event.syscall, failed.event.apiserver], ["write_failed", "EPIPE", "write", "[fd00::1]:443"]);
    const zero = judge({ type: "send", ts: 1n, pid: 7, tid: 8, syscallNr: 44, ret: 0, port: 443, addr: "10.0.0.1", sk: 1n, comm: "m" }, opts);
    assert.ok(zero.kind === "loss");
    assert.deepEqual([zero.event.cause, zero.event.errno, zero.event.syscall], ["zero_byte_write", null, "sendto"]);
  });

  it("prefers canonical errno names over aliases", () => {
    assert.equal(errnoName(11), "EAGAIN");
    assert.equal(errnoName(9999), "E9999");
  });

  it("judges connection deaths", () => {
    const reset = judge(close({ reset: true, err: 104, unansweredBytes: 1834, waitedNs: 2_500_000n, retransmits: 3 }), opts);
    assert.ok(reset.kind === "loss");
    assert.deepEqual(
      [reset.event.cause, reset.event.errno, reset.event.unansweredBytes, reset.event.unansweredForMs, reset.event.retransmits, reset.connectionLoss],
      ["connection_reset", "ECONNRESET", 1834, 2.5, 3, "reset"],
    );
    const unanswered = judge(close({ unansweredBytes: 500 }), opts);
    assert.ok(unanswered.kind === "loss");
    assert.deepEqual([unanswered.event.cause, unanswered.event.errno, unanswered.connectionLoss], ["connection_closed_unanswered", null, "closed_unanswered"]);
    const timeout = judge(close({ err: 110, unansweredBytes: 500 }), opts);
    assert.ok(timeout.kind === "loss" && timeout.connectionLoss === "timeout" && timeout.event.cause === "connection_reset");
    // Idle: below the request threshold (an HTTP/2 PING in a TLS record) is not a lost write.
    assert.deepEqual(judge(close({ reset: true, unansweredBytes: 40 }), opts), { kind: "connection_loss", pid: 7, process: "manager", reason: "reset" });
    assert.deepEqual(judge(close({ unansweredBytes: 0 }), opts), { kind: "none" });
  });

  it("says a close is uncertain where the wire could not tell (TLS answers marked it), and only there", () => {
    const marked: UncertainClose = { ...(close({ reset: true, err: 104, unansweredBytes: 1880 }) as UncertainClose), uncertain: true };
    const uncertain = judge(marked, opts);
    assert.ok(uncertain.kind === "loss");
    assert.deepEqual([uncertain.event.cause, uncertain.event.verdict], ["connection_reset", "uncertain"]);
    const certain = judge(close({ reset: true, err: 104, unansweredBytes: 1880 }), opts);
    assert.ok(certain.kind === "loss" && !("verdict" in certain.event));
  });

  it("says who closed: the client's own close is its giving up, the apiserver's a loss it caused", () => {
    // The client's FIN first (its timeout), whatever came back after it.
    for (const over of [{}, { reset: true, err: 32 }]) {
      const gaveUp = judge(close({ closedBy: 1, unansweredBytes: 500, ...over }), opts);
      assert.ok(gaveUp.kind === "loss", JSON.stringify(over));
      assert.deepEqual([gaveUp.event.cause, gaveUp.connectionLoss], ["client_gave_up", "closed_by_client"]);
    }
    const byServer = judge(close({ closedBy: 2, unansweredBytes: 500 }), opts);
    assert.ok(byServer.kind === "loss");
    assert.deepEqual([byServer.event.cause, byServer.connectionLoss], ["connection_closed_unanswered", "closed_unanswered"]);
    const resetByServer = judge(close({ closedBy: 2, reset: true, err: 104, unansweredBytes: 500 }), opts);
    assert.ok(resetByServer.kind === "loss" && resetByServer.event.cause === "connection_reset" && resetByServer.connectionLoss === "reset");
    // The apiserver's FIN first, then a reset for what the client wrote after it (EPIPE in CLOSE_WAIT): the apiserver closed.
    const closedThenReset = judge(close({ closedBy: 2, reset: true, err: 32, unansweredBytes: 500 }), opts);
    assert.ok(closedThenReset.kind === "loss");
    assert.deepEqual([closedThenReset.event.cause, closedThenReset.event.errno, closedThenReset.connectionLoss], ["connection_closed_unanswered", null, "closed_unanswered"]);
    // The client closing an idle connection is normal.
    assert.deepEqual(judge(close({ closedBy: 1, unansweredBytes: 40 }), opts), { kind: "none" });
  });
});
