// Many files' programs in one bpftrace: each part keeps its own maps and its
// lines say whose they are, whatever its renderer wrote; one BEGIN, one END.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { combinePrograms, programBlocks } from "../../../../src/sources/probe/combinedProgram.ts";
import { parseProbeLine } from "../../../../src/sources/probe/probeOutput.ts";
import { renderTlsProgram } from "../../../../src/sources/tls/tlsProbeProgram.ts";

const PART = `// Generated for one file.
BEGIN {
	@lw_pids[(uint64)42] = nsecs;
	printf("hello %llu %d\\n", nsecs, $1);
}

/* a block comment { with a brace */
uprobe:/proc/9/fd/3:SSL_read /@lw_pids[pid]/ {
	// a comment with a brace }
	@rd[pid, tid] = arg0; printf("follow %llu %d %llu\\n", nsecs, pid, @lw_pids[pid]);
	if (arg0 != 0) { printf("a string with @at and {braces} and \\"quotes\\"\\n"); }
}

END {
	clear(@lw_pids); clear(@rd);
}
`;

void describe("combined uprobe programs", { timeout: 10_000 }, () => {
  void it("splits a program into its top-level blocks, comments and braces in strings and comments left out", () => {
    const blocks = programBlocks(PART);
    assert.deepEqual(blocks.map((b) => b.header), ["BEGIN", "uprobe:/proc/9/fd/3:SSL_read /@lw_pids[pid]/", "END"]);
    assert.match(blocks[1]!.body, /if \(arg0 != 0\) \{ printf/);
    assert.doesNotMatch(blocks[1]!.body, /comment/);
  });

  void it("refuses a program whose braces do not match, naming where", () => {
    assert.throws(() => programBlocks("BEGIN { printf(\"x\\n\");\n"), /never closed/);
    assert.throws(() => programBlocks("BEGIN { }\n}\n"), /line 2 closes no block/);
  });

  void it("gives each part its own maps and tags its lines with its id; one BEGIN and one END hold all of theirs", () => {
    const text = combinePrograms([{ id: 3, text: PART }, { id: 17, text: PART }]);
    assert.equal(text.match(/^BEGIN \{/gm)?.length, 1);
    assert.equal(text.match(/^END \{/gm)?.length, 1);
    for (const id of [3, 17]) {
      assert.ok(text.includes(`@lw_pids__${id}[(uint64)42] = nsecs;`), `part ${id}'s BEGIN`);
      assert.ok(text.includes(`uprobe:/proc/9/fd/3:SSL_read /@lw_pids__${id}[pid]/ {`), `part ${id}'s predicate`);
      assert.ok(text.includes(`@rd__${id}[pid, tid] = arg0; printf("#${id} follow %llu %d %llu\\n", nsecs, pid, @lw_pids__${id}[pid]);`));
      assert.ok(text.includes(`clear(@lw_pids__${id}); clear(@rd__${id});`), `part ${id}'s END`);
      assert.ok(text.includes(`printf("#${id} a string with @at and {braces} and \\"quotes\\"\\n")`), "strings as written");
    }
    assert.doesNotMatch(text, /@lw_pids\[|@rd\[/, "no map left shared");
  });

  void it("a part's line parses as it would alone, with the part it came from", () => {
    const parsed = parseProbeLine(JSON.stringify({ type: "printf", data: "#17 follow 5 42 4\n" }));
    assert.deepEqual(parsed, { ok: true, record: { type: "follow", ts: 5n, pid: 42, since: 4n }, part: 17 });
    const alone = parseProbeLine(JSON.stringify({ type: "printf", data: "follow 5 42 4\n" }));
    assert.deepEqual(alone, { ok: true, record: { type: "follow", ts: 5n, pid: 42, since: 4n } });
  });

  void it("a part's printed map parses as it would alone, with the part it came from", () => {
    const parsed = parseProbeLine(JSON.stringify({ type: "map", data: { "@writes__17": { "42": 3 } } }));
    assert.deepEqual(parsed, { ok: true, record: { type: "counters", map: "writes", entries: [{ key: [42], value: 3n }] }, part: 17 });
    assert.equal(parseProbeLine(JSON.stringify({ type: "map", data: { "@writes__x": { "42": 3 } } })).ok, false, "no part id, no known map");
  });

  void it("takes the TLS program as its renderer writes it", () => {
    const tls = renderTlsProgram({ library: "/proc/1/fd/3", programId: 4, pids: [42], execWatch: false });
    const text = combinePrograms([{ id: 4, text: tls }, { id: 5, text: tls.replaceAll("/proc/1/fd/3", "/proc/1/fd/4") }]);
    assert.equal(programBlocks(text).length, programBlocks(tls).length * 2 - 3, "every probe of both, one BEGIN, one END, one tick");
    assert.doesNotMatch(text, /@(?![a-z_]+__[45]\b)[a-z_]+/, "every map is a part's");
  });

  void it("runs the liveness tick once, the first part's: one timer whose gaps say what the kernel skipped", () => {
    const tls = renderTlsProgram({ library: "/proc/1/fd/3", programId: 4, pids: [42], execWatch: false });
    assert.equal(tls.match(/^interval:s:1 /gm)?.length, 1, "each part ticks alone");
    const text = combinePrograms([{ id: 4, text: tls }, { id: 5, text: tls.replaceAll("/proc/1/fd/3", "/proc/1/fd/4") }]);
    assert.equal(text.match(/^interval:s:1 /gm)?.length, 1);
    assert.ok(text.includes('printf("#4 tick %llu\\n", nsecs)'), "the first part's tick");
  });

  void it("keeps every part's other timers: they print the part's own state", () => {
    const counting = `${PART}\ninterval:s:1 {\n\tprint(@sent);\n}\n`;
    const text = combinePrograms([{ id: 3, text: counting }, { id: 7, text: counting }]);
    assert.ok(text.includes("print(@sent__3);") && text.includes("print(@sent__7);"));
  });

  void it("refuses two parts with one id", () => {
    assert.throws(() => combinePrograms([{ id: 1, text: PART }, { id: 1, text: PART }]), /part id 1 given twice/);
  });
});
