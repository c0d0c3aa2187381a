// A followed OpenSSL client's close is judged by what its SSL_read returned:
// the TLS verdict for the same socket replaces the bytes on the wire, in
// whichever order the two programs' lines come; nothing else changes.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { PrintfRecordOf } from "../../../../src/sources/probe/probeLines.ts";
import type { ProbeRecord } from "../../../../src/sources/probe/probeOutput.ts";
import { TlsAnswers, type TlsCloseRecord } from "../../../../src/sources/tls/tlsAnswers.ts";

const PID = 3331;
const SK = 0xffff888102e02e40n;
const MS = 1_000_000n;

const close = (over: Partial<PrintfRecordOf<"close">> = {}): PrintfRecordOf<"close"> => ({
  type: "close", ts: 100n * MS, pid: PID, tid: PID, err: 104, reset: true, closedBy: 2, unansweredBytes: 0, waitedNs: 0n, retransmits: 0,
  port: 6443, addr: "127.0.0.1", sk: SK, comm: "python3", ...over,
});
const send = (over: Partial<PrintfRecordOf<"send">> = {}): PrintfRecordOf<"send"> => ({
  type: "send", ts: 101n * MS, pid: PID, tid: PID, syscallNr: 44, ret: -32, port: 6443, addr: "127.0.0.1", sk: SK, comm: "python3", ...over,
});
const verdict = (over: Partial<TlsCloseRecord> = {}): TlsCloseRecord => ({ type: "tls_close", ts: 100n * MS + 300n, pid: PID, sk: SK, unansweredBytes: 504, waitedNs: 400_000n, peerClosed: false, ...over });

function setup() {
  const released: ProbeRecord[] = [];
  let drops = 0;
  const answers = new TlsAnswers({ release: (r) => released.push(r), unansweredMinBytes: 64, onDrop: () => drops++ });
  /** What the loss stages do with a record. */
  const handle = (r: ProbeRecord): void => {
    if (r.type === "tls_close") answers.addVerdict(r);
    else if (!answers.offer(r)) released.push(r);
  };
  return { answers, released, handle, drops: () => drops };
}

void describe("TLS answers", { timeout: 10_000 }, () => {
  void it("puts the TLS verdict in a followed close that the wire took for answered (a session ticket), whichever line comes first", () => {
    for (const order of ["close first", "verdict first"] as const) {
      const { answers, released, handle } = setup();
      answers.setAttached(PID, true);
      if (order === "close first") {
        handle(close());
        assert.deepEqual(released, [], "the close waits for its verdict");
        handle(verdict());
      } else {
        handle(verdict());
        handle(close());
      }
      assert.deepEqual(released, [close({ unansweredBytes: 504, waitedNs: 400_000n })], order);
    }
  });

  void it("keeps the wire's count of a request unanswered since before the TLS program followed the process: it did not see it written", () => {
    const { answers, released, handle } = setup();
    // Followed since 60 ms; the wire's request since 50 ms (100 ms close, 50 ms wait), which TLS saw none of.
    answers.setAttached(PID, true, 60n * MS);
    handle(close({ unansweredBytes: 620, waitedNs: 50n * MS }));
    handle(verdict({ unansweredBytes: 0, waitedNs: 0n }));
    assert.deepEqual(released, [close({ unansweredBytes: 620, waitedNs: 50n * MS })]);
  });

  void it("reports, as uncertain, a close the wire took for answered only by what may be session tickets, when no TLS program read the answer", () => {
    const ambiguous: ProbeRecord = { type: "ambiguous", ts: 100n * MS - 10n, pid: PID, sk: SK, bytes: 1880, waitedNs: 2n * MS };
    // Not followed by a TLS program (a library's first process): the kernel's doubt is what there is.
    const { released, handle } = setup();
    handle(ambiguous);
    handle(close());
    assert.deepEqual(released, [{ ...close({ unansweredBytes: 1880, waitedNs: 2n * MS }), uncertain: true }]);
    // Followed: the TLS program read what the client read, and knows.
    const followed = setup();
    followed.answers.setAttached(PID, true);
    followed.handle(ambiguous);
    followed.handle(close());
    followed.handle(verdict({ unansweredBytes: 0, waitedNs: 0n }));
    assert.deepEqual(followed.released, [close()]);
    // A close the wire already took for unanswered needs no doubt.
    const plain = setup();
    plain.handle(ambiguous);
    plain.handle(close({ unansweredBytes: 620, waitedNs: 9n }));
    assert.deepEqual(plain.released, [close({ unansweredBytes: 620, waitedNs: 9n })]);
  });

  void it("clears a close the wire took for unanswered when the client read its answer", () => {
    const { answers, released, handle } = setup();
    answers.setAttached(PID, true);
    handle(close({ unansweredBytes: 620, waitedNs: 9n }));
    handle(verdict({ unansweredBytes: 0, waitedNs: 0n }));
    assert.deepEqual(released, [close({ unansweredBytes: 0, waitedNs: 0n })]);
  });

  void it("says the server closed when the client's FIN answered the server's close_notify", () => {
    const { answers, released, handle } = setup();
    answers.setAttached(PID, true);
    handle(close({ err: 0, reset: false, closedBy: 1 }));
    handle(verdict({ peerClosed: true }));
    assert.deepEqual(released, [close({ err: 0, reset: false, closedBy: 2, unansweredBytes: 504, waitedNs: 400_000n })]);
    // Without a close_notify read, the client's FIN is the client's.
    handle(close({ ts: 200n * MS, err: 0, reset: false, closedBy: 1 }));
    handle(verdict({ ts: 200n * MS }));
    assert.equal((released.at(-1) as PrintfRecordOf<"close">).closedBy, 1);
  });

  void it("judges a close with no verdict by the wire once it has waited holdNs (a socket the TLS program did not follow)", () => {
    const { answers, released, handle } = setup();
    let woken = 0;
    answers.onWaiting(() => woken++);
    answers.setAttached(PID, true);
    handle(close({ unansweredBytes: 700 }));
    assert.equal(woken, 1, "whoever drains is told a record waits");
    answers.drain(100n * MS + 49n * MS);
    assert.deepEqual(released, []);
    answers.drain(100n * MS + 50n * MS);
    assert.deepEqual(released, [close({ unansweredBytes: 700 })]);
  });

  void it("keeps arrival order: a send behind a waiting close waits too", () => {
    const { answers, released, handle } = setup();
    answers.setAttached(PID, true);
    const other = send({ sk: 7n, ret: -104 });
    handle(close());
    handle(other);
    assert.deepEqual(released, []);
    handle(verdict());
    assert.deepEqual(released, [close({ unansweredBytes: 504, waitedNs: 400_000n }), other]);
  });

  void it("folds a failed send on a socket the TLS verdict reported dead: one lost request, one event", () => {
    const { answers, released, handle } = setup();
    answers.setAttached(PID, true);
    handle(verdict());
    handle(close());
    handle(send());
    assert.deepEqual(released, [close({ unansweredBytes: 504, waitedNs: 400_000n })]);
    // The same address closing again is a new connection: its failed sends are reported.
    handle(verdict({ ts: 200n * MS, unansweredBytes: 0 }));
    handle(close({ ts: 200n * MS }));
    handle(send({ ts: 201n * MS }));
    assert.equal(released.at(-1)?.type, "send");
  });

  void it("forgets a dead socket once its address closes again, followed or not: a failed send there is a new connection's", () => {
    const { answers, released, handle } = setup();
    answers.setAttached(PID, true);
    handle(verdict());
    handle(close());
    answers.setAttached(PID, false);
    handle(close({ ts: 200n * MS, unansweredBytes: 0 })); // a connection no TLS program followed, at the same address
    handle(send({ ts: 201n * MS }));
    assert.equal(released.at(-1)?.type, "send");
  });

  void it("passes everything of a process no TLS program follows at once, untouched", () => {
    const { released, handle } = setup();
    const records: ProbeRecord[] = [close({ unansweredBytes: 900 }), send(), { type: "tick", ts: 1n }];
    for (const r of records) handle(r);
    assert.deepEqual(released, records);
  });

  void it("does not take a verdict of another process for its socket", () => {
    const { answers, released, handle } = setup();
    answers.setAttached(PID, true);
    handle(verdict({ pid: 99 }));
    handle(close({ unansweredBytes: 0 }));
    answers.drain(200n * MS);
    assert.deepEqual(released, [close({ unansweredBytes: 0 })]);
  });

  void it("holds at most its capacity: the oldest is judged by the wire, and counted", () => {
    const released: ProbeRecord[] = [];
    let drops = 0;
    const answers = new TlsAnswers({ release: (r) => released.push(r), unansweredMinBytes: 64, capacity: 2, onDrop: () => drops++ });
    answers.setAttached(PID, true);
    for (const sk of [1n, 2n, 3n]) answers.offer(close({ sk }));
    assert.equal(answers.size.waiting, 2);
    assert.deepEqual(released.map((r) => (r as PrintfRecordOf<"close">).sk), [1n]);
    assert.equal(drops, 1);
    answers.flush();
    assert.equal(released.length, 3);
  });
});
