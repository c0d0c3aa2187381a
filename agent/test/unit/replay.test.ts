// The data path from a recording to loss events and metrics, against golden
// files, with no root, no bpftrace and no network: the shipped
// recordings/demo.jsonl (a real demo run under --record) goes through
// `replayEvents`, which feeds the agent's own parser, counters, socket-event
// rules and span correlator with the recording's clock, and
// - the events must equal agent/test/fixtures/replay/demo.events.jsonl line
//   for line, as `lostwrite replay --json recordings/demo.jsonl` prints them;
// - what those stages counted must equal, line for line, the agent's /metrics
//   in both formats it serves: agent/test/fixtures/replay/demo.metrics.txt
//   (classic text) and demo.openmetrics.txt (OpenMetrics, with exemplars).
//
// It proves that a change anywhere between a probe line and a LossEvent
// (parsing, counters, causes, correlation to spans, the event's JSON shape,
// metric names, labels and values) leaves what the demo recording produces
// unchanged, or shows which event and which field, or which series, it
// changed. Nothing is normalised or left out: replay takes time from the
// recording (the detection latency histogram and the exemplars' timestamps
// too), so two runs give the same bytes, and the agent's registry holds no
// default process_* or nodejs_* metrics, which would differ from run to run.
// The metrics are those of the replayed stages: gauges the live agent's other
// stages set (targets, probe_up, queues, feed clients) stay at their start.
//
// A deliberate change of the events or the metrics: regenerate the golden
// files with
//   UPDATE_GOLDEN=1 node_modules/.bin/node --test agent/test/unit/replay.test.ts
// and review their diff (`git diff agent/test/fixtures/replay/`) before committing.
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { Writable } from "node:stream";
import { describe, it } from "node:test";
import { replayEvents } from "../../src/replay.ts";
import { repoPath } from "../repoPath.ts";

const repoRoot = repoPath();
const RECORDING = path.join(repoRoot, "recordings/demo.jsonl");
const GOLDEN = path.join(repoRoot, "agent/test/fixtures/replay/demo.events.jsonl");
const GOLDEN_METRICS = path.join(repoRoot, "agent/test/fixtures/replay/demo.metrics.txt");
const GOLDEN_OPENMETRICS = path.join(repoRoot, "agent/test/fixtures/replay/demo.openmetrics.txt");
const UPDATE = process.env.UPDATE_GOLDEN === "1";

/** The fields in which two events (JSON lines) differ, one per line. */
function fieldChanges(want: string, got: string): string[] {
  const a = JSON.parse(want) as Record<string, unknown>;
  const b = JSON.parse(got) as Record<string, unknown>;
  const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])];
  const changes = keys
    .filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]))
    .map((k) => `      ${k}: expected ${JSON.stringify(a[k])}, got ${JSON.stringify(b[k])}`);
  // Same values, different key order: the JSON bytes still changed.
  return changes.length > 0 ? changes : [`      key order: expected ${Object.keys(a).join(",")}, got ${Object.keys(b).join(",")}`];
}

/**
 * A diff of two lists of lines: what is missing (-), what is new (+), and for
 * a line replaced in place, how it changed (`changed`). `item` names a line
 * ("event", "line"). Empty when they are equal.
 */
function describeDifferences(
  expected: string[],
  actual: string[],
  item: string,
  changed: (want: string, got: string) => string[],
): string {
  // Longest common subsequence, so one missing event does not shift every later one.
  const n = expected.length;
  const m = actual.length;
  const lcs: number[][] = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i]![j] = expected[i] === actual[j] ? lcs[i + 1]![j + 1]! + 1 : Math.max(lcs[i + 1]![j]!, lcs[i]![j + 1]!);
    }
  }
  const out: string[] = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && expected[i] === actual[j]) {
      i++;
      j++;
    } else if (i < n && j < m && lcs[i + 1]![j + 1] === lcs[i]![j]) {
      out.push(`  ${item} ${j + 1} changed${i === j ? "" : ` (expected as ${item} ${i + 1})`}:`, ...changed(expected[i]!, actual[j]!));
      i++;
      j++;
    } else if (j < m && (i === n || lcs[i]![j + 1]! >= lcs[i + 1]![j]!)) {
      out.push(`+ ${item} ${j + 1} is new: ${actual[j]}`);
      j++;
    } else {
      out.push(`- expected ${item} ${i + 1} is missing: ${expected[i]}`);
      i++;
    }
  }
  return out.join("\n");
}

/** A metrics line replaced in place: the old and the new line. */
function lineChange(want: string, got: string): string[] {
  return [`      expected ${want}`, `      got      ${got}`];
}

/** Replays the recording once for every test below; warnings and bad records fail them. */
const replayed = (async () => {
  let stderr = "";
  const err = new Writable({
    write(chunk: Buffer, _encoding, done) {
      stderr += chunk.toString();
      done();
    },
  });
  const result = await replayEvents(RECORDING, err);
  return { ...result, stderr };
})();

/** `actual` (a file's text) against the golden file `golden`, or written to it under UPDATE_GOLDEN=1; differences by line. */
function assertGolden(golden: string, actual: string, item: string, changed: (want: string, got: string) => string[]): void {
  if (UPDATE) {
    writeFileSync(golden, actual);
    return;
  }
  const expected = readFileSync(golden, "utf8");
  if (expected === actual) return;
  // Numbered as in the file: the metrics have blank lines.
  const lines = (text: string): string[] => (text.endsWith("\n") ? text.slice(0, -1) : text).split("\n");
  const diff = describeDifferences(lines(expected), lines(actual), item, changed);
  assert.fail(
    `replaying ${path.relative(repoRoot, RECORDING)} no longer gives ${path.relative(repoRoot, golden)} ` +
      `(${lines(expected).length} ${item}s expected, ${lines(actual).length} produced):\n${diff || "  (only blank lines differ)"}\n` +
      "If the change is intended, regenerate with UPDATE_GOLDEN=1 (see the top of this file).",
  );
}

void describe("replay of the shipped demo recording", () => {
  void it("reads the recording without bad records or warnings", async () => {
    const { badRecords, stderr } = await replayed;
    assert.equal(badRecords, 0, `the recording has bad records:\n${stderr}`);
    assert.equal(stderr, "", "replay wrote warnings");
  });

  void it("produces the golden loss events, byte for byte", async () => {
    const { events } = await replayed;
    assertGolden(GOLDEN, events.map((event) => `${JSON.stringify(event)}\n`).join(""), "event", fieldChanges);
  });

  void it("leaves the golden /metrics (classic text), byte for byte", async () => {
    const { metrics } = await replayed;
    assertGolden(GOLDEN_METRICS, await metrics.text(), "line", lineChange);
  });

  void it("leaves the golden /metrics (OpenMetrics, with exemplars), byte for byte", async () => {
    const { metrics } = await replayed;
    assertGolden(GOLDEN_OPENMETRICS, await metrics.openMetrics(), "line", lineChange);
  });
});
