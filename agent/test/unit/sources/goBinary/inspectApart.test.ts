// The inspection the agent runs in a child process (inspectApart.ts): the
// report that comes back is the one inspectGoBinary gives in the agent's own
// process, for a Go binary with DWARF and for files turned down; and what
// comes back from a child that misbehaves (no JSON, a wrong field, a crash, a
// hang) is a rejection saying what was wrong, never an exception or a report
// taken as it came.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { inspectGoBinaryApart, reportFromChild } from "../../../../src/sources/goBinary/inspectApart.ts";
import { inspectGoBinary, type GoBinaryReport } from "../../../../src/sources/goBinary/inspectGoBinary.ts";
import { buildGoFixtures, goUnavailable, skipUnlessCi } from "./goFixtureBuilds.ts";

const goMissing = goUnavailable();

function reason(report: GoBinaryReport): string {
  if (report.ok) assert.fail(`expected a rejection of ${report.path}, got an inspected binary`);
  return report.reason;
}

describe("inspectGoBinaryApart", { timeout: 240_000 }, () => {
  let dir = "";
  before(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-apart-"));
  });
  after(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("gives the in-process report for files that are turned down, reasons and all", async () => {
    const text = path.join(dir, "not-elf");
    writeFileSync(text, "#!/bin/sh\necho hi\n");
    for (const file of [text, path.join(dir, "missing"), dir, process.execPath]) {
      assert.deepEqual(await inspectGoBinaryApart(file), await inspectGoBinary(file), file);
    }
  });

  it("gives the in-process report of a Go binary with DWARF, layout read from it", { skip: skipUnlessCi(goMissing) }, async () => {
    if (goMissing !== null) assert.fail(`CI=true and ${goMissing}`);
    const { dir: buildDir, binaries } = await buildGoFixtures({ xnet: { fixture: "xnet-http2-client" } });
    try {
      const apart = await inspectGoBinaryApart(binaries.xnet);
      assert.ok(apart.ok && apart.families.some((f) => f.layoutFrom === "dwarf"), JSON.stringify(apart).slice(0, 300));
      assert.deepEqual(apart, await inspectGoBinary(binaries.xnet));
    } finally {
      rmSync(buildDir, { recursive: true, force: true });
    }
  });

  /** A child script of the test's own, run in place of inspectChild. */
  const script = (name: string, body: string): string => {
    const file = path.join(dir, `${name}.mjs`);
    writeFileSync(file, body);
    return file;
  };

  it("turns down a report with a field of the wrong type, naming the field and its value", async () => {
    const binary = process.execPath;
    const bad = script("bad-field", `process.stdout.write(JSON.stringify({ ok: false, path: ${JSON.stringify(binary)}, reason: 42 }));`);
    const why = reason(await inspectGoBinaryApart(binary, { script: bad }));
    assert.match(why, /^unexpected error inspecting the binary: the inspecting process's report is malformed: reason = 42: /);
  });

  it("turns down output that is not JSON, a crash, output past its limit and a child that hangs", async () => {
    const binary = process.execPath;
    assert.match(reason(await inspectGoBinaryApart(binary, { script: script("text", "console.log('segfault?');") })), /wrote no JSON report: "segfault\?\\n"/);
    assert.match(
      reason(await inspectGoBinaryApart(binary, { script: script("crash", "console.error('out of memory'); process.exit(134);") })),
      /the inspecting process exited with code 134: out of memory$/,
    );
    assert.match(reason(await inspectGoBinaryApart(binary, { script: script("flood", "process.stdout.write('x'.repeat(2 * 1024 * 1024));") })), /wrote more than 1048576 bytes/);
    assert.match(
      reason(await inspectGoBinaryApart(binary, { script: script("hang", "setInterval(() => {}, 1000);"), timeoutMs: 300 })),
      /took more than 0.3 s and was killed/,
    );
  });

  it("turns down a well-formed report of another file, and extra or missing fields of an inspected one", () => {
    assert.match(reason(reportFromChild("/a", JSON.stringify({ ok: false, path: "/b", reason: "x" }))), /reported on "\/b", not on this binary/);
    const layout = Object.fromEntries(
      ["requestMethod", "requestUrl", "urlPath", "connTconn", "tlsConnConn", "tcpConnFd", "netFdSysfd", "readLoopConn", "streamConn", "streamId", "metaHeadersFrame", "metaFields", "frameStreamId", "fieldName", "fieldValue", "rstErrCode", "goAwayLastStreamId", "goAwayErrCode"].map((k) => [k, 8]),
    );
    const at = { symbol: "f", vaddr: 4096, fileOffset: 0, probeOffset: 4, branchVaddr: null };
    const functions = Object.fromEntries(["encodeAndWriteHeaders", "processHeaders", "processResetStream", "processGoAway", "cleanup", "writeStreamReset"].map((k) => [k, at]));
    const good = {
      ok: true, path: "/a", goVersion: "go1.26.8", goMinor: 26, goMinorFrom: "build info", pclntabLayout: "go1.20", pclntabFoundBy: "section", xNet: null,
      families: [{ name: "std", functions, layout, layoutFrom: "dwarf", differsFromTable: [] }],
      incompleteFamilies: [], unverifiedFamilies: [], probePlacement: "entry", buildId: "ab12",
    };
    assert.deepEqual(reportFromChild("/a", JSON.stringify(good)), good);
    const negative = structuredClone(good);
    negative.families[0]!.layout.streamId = -1;
    assert.match(reason(reportFromChild("/a", JSON.stringify(negative))), /families\.0\.layout\.streamId = -1: /);
    const extra = { ...structuredClone(good), secret: 1 };
    assert.match(reason(reportFromChild("/a", JSON.stringify(extra))), /report is malformed: /);
    const noFamilies: Partial<typeof good> = structuredClone(good);
    delete noFamilies.families;
    assert.match(reason(reportFromChild("/a", JSON.stringify(noFamilies))), /families = undefined: /);
  });
});
