// Golden bpftrace output → typed records, and every kind of bad line counted
// as an error instead of thrown.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { MAX_LINE_BYTES, parseProbeLine } from "../../../../src/sources/probe/probeOutput.ts";
import { repoPath } from "../../../repoPath.ts";

const fixture = (name: string): string => readFileSync(repoPath("agent/test/fixtures/bpftrace", name), "utf8");
const bigintsAsStrings = (value: unknown): unknown => JSON.parse(JSON.stringify(value, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v)));

describe("parseProbeLine", () => {
  it("parses a recorded session into the golden records (u64 beyond 2^53 kept exact)", () => {
    const lines = fixture("session-0.17.jsonl").split("\n").filter(Boolean);
    const records = lines.map((line) => {
      const result = parseProbeLine(line);
      assert.ok(result.ok, `${line}: ${result.ok ? "" : result.error}`);
      return result.record;
    });
    assert.deepEqual(bigintsAsStrings(records), JSON.parse(fixture("session-0.17.golden.json")));
  });

  it("reports every malformed, unknown or truncated line as an error naming what is wrong", () => {
    const lines = fixture("malformed.jsonl").split("\n").filter(Boolean);
    const errors = lines.map((line) => parseProbeLine(line));
    for (const [i, result] of errors.entries()) assert.equal(result.ok, false, `line ${i + 1} should be rejected: ${lines[i]}`);
    const messages = errors.map((r) => (r.ok ? "" : r.error));
    assert.match(messages[0]!, /not JSON/);
    assert.match(messages[2]!, /type "syscall"/);
    assert.match(messages[3]!, /unknown printf kind "teleport"/);
    assert.match(messages[4]!, /malformed "send" line/);
    assert.match(messages[6]!, /unknown map "@mystery"/);
    assert.match(messages[7]!, /bad key "abc"/);
  });

  it("parses an exec line: the cgroup id as a u64, a comm with spaces whole", () => {
    const result = parseProbeLine(JSON.stringify({ type: "printf", data: "exec 8150023468125 4242 18446744073709551615 my op\n" }));
    assert.ok(result.ok);
    assert.deepEqual(result.record, { type: "exec", ts: 8150023468125n, pid: 4242, cgroup: 18446744073709551615n, comm: "my op" });
    const short = parseProbeLine(JSON.stringify({ type: "printf", data: "exec 1 2\n" }));
    assert.equal(short.ok, false);
  });

  it("rejects an oversized line without parsing it", () => {
    const result = parseProbeLine(`{"type": "printf", "data": "${"x".repeat(MAX_LINE_BYTES)}"}`);
    assert.equal(result.ok, false);
    assert.match(result.ok ? "" : result.error, /longer than/);
  });
});
