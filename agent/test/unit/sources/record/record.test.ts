// The --record format against golden files: the writer produces them byte for
// byte, the reader reads them back, and a damaged file is read around its bad
// records with errors naming the line, the key and the value.
import assert from "node:assert/strict";
import { parseProbeLine } from "../../../../src/sources/probe/probeOutput.ts";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { AgentMetrics } from "../../../../src/telemetry/metrics.ts";
import { parseRecordLine } from "../../../../src/sources/record/format.ts";
import { openRecordReader, type BadRecord } from "../../../../src/sources/record/reader.ts";
import { openRecordWriter } from "../../../../src/sources/record/writer.ts";
import type { DataRecord } from "../../../../src/sources/record/format.ts";

const fixtures = join(import.meta.dirname, "fixtures");
const SPANS_BODY = Buffer.from("0a00ff102273746174757320e29c93", "hex"); // binary, then "status ✓"

// What session.jsonl holds, as the reader must return it.
const SESSION_HEADER = {
  kind: "header",
  t: 8150000000000n,
  version: 5,
  node: "n1",
  clockOffsetNs: 1796215694123456789n,
  recordedAt: "2026-12-02T15:04:05.123456Z",
  agent: { version: "0.1.0", config: { targetComm: "^manager$", apiserver: ["127.0.0.1:6443"], correlationWindowMs: 10000 } },
} as const;
const SESSION_RECORDS: DataRecord[] = [
  { kind: "probe", t: 8150000100000n, line: '{"type": "attached_probes", "data": {"probes": 7}}' },
  {
    kind: "probe",
    t: 8150023468900n,
    line: '{"type": "printf", "data": "send 8150023468125 3331 3331 44 -104 6443 127.0.0.1 18446612685456223808 python3\\n"}',
  },
  {
    kind: "spans",
    t: 8150500000000n,
    peer: "127.0.0.1:40312",
    contentType: "application/x-protobuf",
    body: SPANS_BODY,
    sender: { kind: "target", pid: 3331, nsPid: 3331, comm: "python3", namespace: null, pod: null },
  },
  { kind: "clock", t: 8151000000000n, clockOffsetNs: 1796215694123457001n },
  {
    kind: "probe",
    t: 8151000000001n,
    line: '{"type": "printf", "data": "close 8150023470311 3331 3331 104 1 2 0 0 0 6443 127.0.0.1 18446612685456223808 python3\\n"}',
  },
  { kind: "goAttached", t: 8151000000002n, pid: 4242, attached: true, since: 8150900000000n },
  { kind: "goProbe", t: 8151000000003n, line: '{"type": "printf", "data": "go_abort 8151000000000 4242 4243 824635023360 3 8\\n"}' },
  { kind: "tlsAttached", t: 8151000000004n, pid: 3331, attached: true },
  { kind: "tlsProbe", t: 8151000000005n, line: '{"type": "printf", "data": "tls_close 8151000000004 3331 18446612685456223808 504 1250000 0\\n"}' },
  { kind: "target", t: 8151000000006n, pid: 3331, process: "python3", added: true },
];

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), "lostwrite-record-"));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function collect(records: AsyncIterable<DataRecord>): Promise<DataRecord[]> {
  const all: DataRecord[] = [];
  for await (const r of records) all.push(r);
  return all;
}

void describe("record writer", () => {
  void it("writes the golden session file byte for byte", async () => {
    const path = join(dir, "session.jsonl");
    const { t, node, clockOffsetNs, recordedAt, agent } = SESSION_HEADER;
    const writer = await openRecordWriter(path, { header: { t, node, clockOffsetNs, recordedAt, agent }, metrics: new AgentMetrics() });
    for (const r of SESSION_RECORDS) {
      if (r.kind === "probe") writer.probeLine(r.line, r.t);
      else if (r.kind === "spans") writer.spans(r.peer, r.contentType, new Uint8Array(r.body), r.t, r.sender);
      else if (r.kind === "clock") writer.clock(r.clockOffsetNs, r.t);
      else if (r.kind === "goAttached") writer.goAttached(r.pid, r.attached, r.since, r.t);
      else if (r.kind === "tlsAttached") writer.tlsAttached(r.pid, r.attached, r.since, r.t);
      else if (r.kind === "tlsProbe") writer.tlsProbeLine(r.line, r.t);
      else if (r.kind === "target") writer.target(r.pid, r.process, r.added, r.t);
      else writer.goProbeLine(r.line, r.t);
    }
    await writer.close();
    assert.equal(await readFile(path, "utf8"), await readFile(join(fixtures, "session.jsonl"), "utf8"));
    assert.equal(writer.dropped, 0);
  });

  void it("drops and counts records past its queue capacity instead of growing", async () => {
    const metrics = new AgentMetrics();
    const path = join(dir, "burst.jsonl");
    let t = 0n;
    const writer = await openRecordWriter(path, {
      header: { node: "n1", clockOffsetNs: 0n, recordedAt: "2026-12-02T15:04:05Z", agent: { version: "0", config: {} } },
      metrics,
      capacity: 10,
      now: () => ++t,
    });
    // A burst in one turn: the disk has not completed a single write yet.
    for (let i = 0; i < 100; i++) writer.probeLine(`line ${i}`);
    await writer.flush();
    writer.probeLine("after the burst");
    await writer.close();

    const lines = (await readFile(path, "utf8")).trim().split("\n");
    // The header took one slot of ten.
    assert.equal(writer.dropped, 91);
    assert.equal(lines.length, 1 + 9 + 1);
    assert.equal((JSON.parse(lines.at(-1) ?? "") as { line: string }).line, "after the burst");
    const dropped = (await metrics.eventsDropped.get()).values.find((v) => v.labels.stage === "record")?.value;
    assert.equal(dropped, 91);
  });

  void it("rejects an unwritable path, naming it", async () => {
    await assert.rejects(
      openRecordWriter(join(dir, "no-such-dir", "x.jsonl"), {
        header: { node: "n1", clockOffsetNs: 0n, recordedAt: "2026-12-02T15:04:05Z", agent: { version: "0", config: {} } },
        metrics: new AgentMetrics(),
      }),
      /--record ".*no-such-dir\/x\.jsonl": cannot open for writing: ENOENT/,
    );
  });
});

void describe("record reader", () => {
  void it("reads the golden session: header first, then every record in order", async () => {
    const reader = await openRecordReader(join(fixtures, "session.jsonl"));
    assert.deepEqual(reader.header, SESSION_HEADER);
    assert.deepEqual(await collect(reader.records()), SESSION_RECORDS);
    assert.equal(reader.badRecords, 0);
  });

  void it("reads a version 1 file with SK 0 in its send and close lines, and every other line as it is", async () => {
    const path = join(dir, "v1.jsonl");
    const lines = (await readFile(join(fixtures, "session.jsonl"), "utf8"))
      .replace('"version":5,', '"version":1,')
      .replace(/,"sender":\{[^}]*\}/, "")
      .replaceAll(" 18446612685456223808 python3", " python3");
    await writeFile(path, lines);
    const reader = await openRecordReader(path);
    assert.equal(reader.header.version, 1);
    const expected = SESSION_RECORDS.map((r) => {
      if (r.kind === "probe") return { ...r, line: r.line.replace(" 18446612685456223808 python3", " 0 python3") };
      if (r.kind !== "spans") return r;
      const before: DataRecord = { ...r };
      delete before.sender; // version 3 added it
      return before;
    });
    assert.deepEqual(await collect(reader.records()), expected);
  });

  void it("reads a version 3 file's go_request lines with PATH_NOW 1 (their paths followed at once), and every other line as it is", async () => {
    const path = join(dir, "v3.jsonl");
    const request = "go_request 8151000000000 4242 4243 824635023360 824634818560 3 62 PATCH 6443 127.0.0.1";
    const goLine = (data: string): string => JSON.stringify({ type: "printf", data: `${data}\n` });
    const header = (await readFile(join(fixtures, "session.jsonl"), "utf8")).split("\n")[0]!.replace('"version":5,', '"version":3,');
    const records = [
      { t: "8151000000010", kind: "goProbe", line: goLine(request) },
      { t: "8151000000011", kind: "goProbe", line: goLine("go_path 4242 824634818560 0 /apis/demo.lostwrite.dev/v1/namespaces/ns/widgets/w9/status") },
    ];
    await writeFile(path, [header, ...records.map((r) => JSON.stringify(r))].join("\n") + "\n");
    const reader = await openRecordReader(path);
    assert.equal(reader.header.version, 3);
    const lines = (await collect(reader.records())).map((r) => (r.kind === "goProbe" ? r.line : r.kind));
    assert.deepEqual(lines, [goLine(request.replace(" 62 PATCH", " 62 1 PATCH")), records[1]!.line]);
  });

  void it("reads a version 4 file's go_headers :status lines as go_status lines, which the agent parses, and every other line as it is", async () => {
    const path = join(dir, "v4.jsonl");
    const goLine = (data: string): string => JSON.stringify({ type: "printf", data: `${data}\n` });
    const header = (await readFile(join(fixtures, "session.jsonl"), "utf8")).split("\n")[0]!.replace('"version":5,', '"version":4,');
    const records = [
      { t: "8151000000010", kind: "goProbe", line: goLine("go_headers 8151000000000 4242 824635023360 3 :status 409") },
      { t: "8151000000011", kind: "goProbe", line: goLine("go_headers 8151000000001 4242 824635023360 5 grpc-status 0") },
      { t: "8151000000012", kind: "goProbe", line: goLine("go_request 8151000000002 4242 4243 824635023360 824634818560 7 62 0 PATCH 6443 127.0.0.1") },
    ];
    await writeFile(path, [header, ...records.map((r) => JSON.stringify(r))].join("\n") + "\n");
    const reader = await openRecordReader(path);
    const lines = (await collect(reader.records())).map((r) => (r.kind === "goProbe" ? r.line : r.kind));
    assert.deepEqual(lines, [goLine("go_status 8151000000000 4242 824635023360 3 409"), records[1]!.line, records[2]!.line]);
    const parsed = parseProbeLine(lines[0]!);
    assert.ok(parsed.ok && parsed.record.type === "go_status" && parsed.record.status === 409, lines[0]);
  });

  void it("skips bad records with the line, the key and the value, and keeps the good ones", async () => {
    const bad: BadRecord[] = [];
    const reader = await openRecordReader(join(fixtures, "bad.jsonl"), { onBadRecord: (b) => bad.push(b) });
    const records = await collect(reader.records());
    assert.deepEqual(
      records.map((r) => (r.kind === "probe" ? r.line : r.kind)),
      ['{"type": "printf", "data": "hello 101 4242\\n"}', "last good"],
    );
    assert.deepEqual(bad.map((b) => [b.line, b.message.replace(/ \(.*\)$/, " (…)")]), [
      [3, "not JSON (…)"],
      [4, 'key "t": want CLOCK_MONOTONIC nanoseconds as a decimal string, got "10x"'],
      [5, 'key "body": want base64, got "not base64!"'],
      [6, 'key "kind": want one of header, probe, spans, clock, goProbe, goAttached, tlsProbe, tlsAttached, target, got "prob"'],
      [8, 'unknown key "pid" in a "probe" record'],
      [9, "a second header; the header belongs on line 1 only"],
      [10, 'key "clockOffsetNs": want signed nanoseconds as a decimal string, got 12'],
      [11, 'want a JSON object, got ["probe"]'],
      [13, "not JSON (…)"],
    ]);
    assert.equal(reader.badRecords, 9);
  });

  void it("refuses a file without a header, an empty file and a missing file, saying which", async () => {
    const noHeader = join(dir, "no-header.jsonl");
    await writeFile(noHeader, '{"t":"1","kind":"probe","line":"x"}\n');
    await assert.rejects(openRecordReader(noHeader), /no-header\.jsonl:1: not a lostwrite record file: the first record must be the header, got kind "probe"/);

    const future = join(dir, "future.jsonl");
    await writeFile(
      future,
      '{"t":"1","kind":"header","version":6,"node":"n","clockOffsetNs":"0","recordedAt":"2026-12-02T15:04:05Z","agent":{"version":"9","config":{}}}\n',
    );
    await assert.rejects(openRecordReader(future), /future\.jsonl:1: .*key "version": want format version 1 or 2 or 3 or 4 or 5, got 6/);

    const empty = join(dir, "empty.jsonl");
    await writeFile(empty, "");
    await assert.rejects(openRecordReader(empty), /empty\.jsonl: empty file/);

    await assert.rejects(openRecordReader(join(dir, "missing.jsonl")), /missing\.jsonl: cannot read the record file: ENOENT/);
  });

  void it("skips an over-long line without holding it", async () => {
    const path = join(dir, "long.jsonl");
    const header = (await readFile(join(fixtures, "session.jsonl"), "utf8")).split("\n")[0] ?? "";
    await writeFile(path, `${header}\n{"t":"1","kind":"probe","line":"${"x".repeat(300_000)}"}\n{"t":"2","kind":"probe","line":"ok"}\n`);
    const bad: BadRecord[] = [];
    const reader = await openRecordReader(path, { maxLineBytes: 100_000, onBadRecord: (b) => bad.push(b) });
    const records = await collect(reader.records());
    assert.deepEqual(records, [{ kind: "probe", t: 2n, line: "ok" }]);
    assert.deepEqual(bad, [{ line: 2, message: "line is over 100000 bytes" }]);
  });

  void it("round-trips arbitrary binary span bodies and odd probe lines", async () => {
    const path = join(dir, "roundtrip.jsonl");
    const body = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 131 + 7) % 256));
    const writer = await openRecordWriter(path, {
      header: { node: "n1", clockOffsetNs: -42n, recordedAt: "2026-12-02T15:04:05Z", agent: { version: "0", config: {} } },
      metrics: new AgentMetrics(),
    });
    writer.spans("[::1]:5000", "application/json", body, 5n);
    writer.probeLine('line with "quotes", \\ backslash, tab\t and ✓', 6n);
    await writer.close();
    const reader = await openRecordReader(path);
    assert.equal(reader.header.clockOffsetNs, -42n);
    const [spans, probe] = await collect(reader.records());
    assert.deepEqual(spans, { kind: "spans", t: 5n, peer: "[::1]:5000", contentType: "application/json", body });
    assert.deepEqual(probe, { kind: "probe", t: 6n, line: 'line with "quotes", \\ backslash, tab\t and ✓' });
  });
});

void describe("parseRecordLine", () => {
  void it("quotes long values short", () => {
    const result = parseRecordLine(JSON.stringify({ t: "y".repeat(500), kind: "probe", line: "x" }));
    assert.equal(result.ok, false);
    assert.ok(!result.ok && result.error.length < 200, "error stays readable");
  });
});
