// The data path from a recording to loss events, against a golden file, with
// no root, no bpftrace and no network: the shipped recordings/demo.jsonl (a
// real demo run under --record) goes through `replayEvents`, which feeds the
// agent's own parser, counters, socket-event rules and span correlator with
// the recording's clock, and the events must equal
// agent/test/fixtures/replay/demo.events.jsonl line for line, as
// `lostwrite replay --json recordings/demo.jsonl` prints them.
//
// It proves that a change anywhere between a probe line and a LossEvent
// (parsing, counters, causes, correlation to spans, the event's JSON shape)
// leaves what the demo recording produces unchanged, or shows which event and
// which field it changed. Nothing is normalised: replay takes time from the
// recording, so two runs give the same bytes.
//
// A deliberate change of the events: regenerate the golden file with
//   UPDATE_GOLDEN=1 node_modules/.bin/node --test agent/test/unit/replay/demoReplay.test.ts
// and review its diff (`git diff agent/test/fixtures/replay/`) before committing.
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
 * A diff of two event lists, events as JSON lines: what is missing (-), what
 * is new (+), and for an event replaced in place, the fields that changed.
 * Empty when they are equal.
 */
function describeDifferences(expected: string[], actual: string[]): string {
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
      out.push(`  event ${j + 1} changed${i === j ? "" : ` (expected as event ${i + 1})`}:`, ...fieldChanges(expected[i]!, actual[j]!));
      i++;
      j++;
    } else if (j < m && (i === n || lcs[i]![j + 1]! >= lcs[i + 1]![j]!)) {
      out.push(`+ event ${j + 1} is new: ${actual[j]}`);
      j++;
    } else {
      out.push(`- expected event ${i + 1} is missing: ${expected[i]}`);
      i++;
    }
  }
  return out.join("\n");
}

void describe("replay of the shipped demo recording", () => {
  void it("produces the golden loss events, byte for byte", async () => {
    let stderr = "";
    const err = new Writable({
      write(chunk: Buffer, _encoding, done) {
        stderr += chunk.toString();
        done();
      },
    });
    const { events, badRecords } = await replayEvents(RECORDING, err);
    assert.equal(badRecords, 0, `the recording has bad records:\n${stderr}`);
    assert.equal(stderr, "", "replay wrote warnings");
    const actual = events.map((event) => JSON.stringify(event));

    if (process.env.UPDATE_GOLDEN === "1") {
      writeFileSync(GOLDEN, actual.map((line) => `${line}\n`).join(""));
      return;
    }
    const expected = readFileSync(GOLDEN, "utf8").split("\n").filter(Boolean);
    const diff = describeDifferences(expected, actual);
    assert.ok(
      diff === "",
      `replaying ${path.relative(repoRoot, RECORDING)} no longer gives ${path.relative(repoRoot, GOLDEN)} ` +
        `(${expected.length} events expected, ${actual.length} produced):\n${diff}\n` +
        "If the change is intended, regenerate with UPDATE_GOLDEN=1 (see the top of this file).",
    );
  });
});
