// Rendering a probe program: the agent's state goes into BEGIN after the
// program's own defaults, so what the agent renders is what the kernel uses.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { parseEndpoint } from "../../../../src/sources/probe/endpointKey.ts";
import { copyMissedClose, PROBE_VARIANTS, renderProgram } from "../../../../src/sources/probe/probeProgram.ts";
import { repoPath } from "../../../repoPath.ts";

/** The MISSED CLOSE blocks of a rendered program, each without its indentation. */
function missedCloseBlocks(program: string): string[] {
  const blocks = program.split("// @missed-close begin").slice(1).map((rest) => rest.slice(0, rest.indexOf("// @missed-close end")));
  return blocks.map((block) => block.split("\n").map((line) => line.trimStart()).join("\n"));
}

describe("renderProgram", { timeout: 10_000 }, () => {
  it("sockets: leaves the send probe out without the send hook, and keeps every other probe and the target marks", () => {
    const full = renderProgram("sockets", { targets: [42], requestLevel: [42], endpoints: [parseEndpoint("10.96.0.1:443")] });
    const base = renderProgram("sockets", { targets: [42], requestLevel: [42], endpoints: [parseEndpoint("10.96.0.1:443")], sendHook: false });
    const probes = (program: string): string[] => program.match(/^(?:tracepoint:\S+|BEGIN|END|interval:\S+)$/gm) ?? [];
    assert.ok(probes(full).includes("tracepoint:sock:sock_send_length"));
    assert.doesNotMatch(base, /^tracepoint:sock:sock_send_length$/m);
    assert.deepEqual(probes(base), probes(full).filter((p) => p !== "tracepoint:sock:sock_send_length"));
    assert.match(base, /@targets\[\(uint64\)42\] = 2;/);
    assert.equal(missedCloseBlocks(base).length, 1, "the MISSED CLOSE block stays in tcp_destroy_sock");
  });
  it("syscalls: has no send probe to leave out, and renders the same either way", () => {
    const state = { targets: [42], endpoints: [parseEndpoint("10.96.0.1:443")] };
    assert.equal(renderProgram("syscalls", { ...state, sendHook: false }), renderProgram("syscalls", state));
  });
  for (const variant of PROBE_VARIANTS) {
    it(`${variant}: renders --unanswered-min-bytes after the program's default, so the folding of dead sockets follows the agent's threshold`, () => {
      const program = renderProgram(variant, { targets: [42], endpoints: [parseEndpoint("10.96.0.1:443")], unansweredMinBytes: 100 });
      const begin = program.slice(program.indexOf("BEGIN"), program.indexOf("printf(\"hello"));
      const defaultAt = begin.indexOf("@unanswered_min = (uint64)64;");
      const renderedAt = begin.indexOf("@unanswered_min = (uint64)100;");
      assert.ok(defaultAt !== -1 && renderedAt > defaultAt, begin);
      assert.match(begin, /@targets\[\(uint64\)42\] = 1;/);
    });
    it(`${variant}: renders a target the Go probe follows as 2, so a restarted probe still leaves its sends alone`, () => {
      const program = renderProgram(variant, { targets: [42, 43], requestLevel: [43, 99], endpoints: [] });
      const begin = program.slice(program.indexOf("BEGIN"), program.indexOf("printf(\"hello"));
      assert.deepEqual(begin.match(/@targets\[.*/g), ["@targets[(uint64)42] = 1;", "@targets[(uint64)43] = 2;"]);
    });
    it(`${variant}: a close the state probe missed is reported from the failed send and from the socket's release alike (one block, copied)`, () => {
      const program = renderProgram(variant, { targets: [], endpoints: [] });
      const blocks = missedCloseBlocks(program);
      assert.equal(blocks.length, 2, "the failed-send probe and tcp_destroy_sock each hold the block");
      assert.equal(blocks[0], blocks[1]);
      assert.match(blocks[0]!, /printf\("close /, "it prints the state probe's close line");
      assert.doesNotMatch(program, /^\s*\/\/ @missed-close$/m, "no placeholder is left");
      const send = program.indexOf("// @missed-close begin");
      assert.ok(program.lastIndexOf("$mfailed = (uint64)(0 - $ret);", send) !== -1, "the failed send hands its errno to the block");
    });
    it(`${variant}: without a threshold keeps the program's default of 64`, () => {
      const program = renderProgram(variant, { targets: [], endpoints: [] });
      assert.equal(program.match(/@unanswered_min = /g)?.length, 1);
    });
  }
});

describe("copyMissedClose", { timeout: 10_000 }, () => {
  it("indents the copy to the placeholder's depth", () => {
    const source = "a {\n\t\t// @missed-close\n}\nb {\n\t// @missed-close begin\n\tx;\n\t// @missed-close end\n}\n";
    assert.equal(copyMissedClose(source, "p.bt"), "a {\n\t\t// @missed-close begin\n\t\tx;\n\t\t// @missed-close end\n}\nb {\n\t// @missed-close begin\n\tx;\n\t// @missed-close end\n}\n");
  });
  it("refuses a program without the block, naming the file", () => {
    assert.throws(() => copyMissedClose("a {\n\t// @missed-close\n}\n", "probes/x.bt"), /probes\/x\.bt lacks the "\/\/ @missed-close begin"/);
  });
});

/** The `// @same-in-both NAME` … `// @same-in-both end` regions of a program file, by name. */
function sameInBoth(file: string): Map<string, string> {
  const regions = new Map<string, string>();
  let open: string | null = null;
  let lines: string[] = [];
  for (const line of readFileSync(repoPath(file), "utf8").split("\n")) {
    const name = /^\s*\/\/ @same-in-both (\S+)$/.exec(line)?.[1];
    if (name === undefined) {
      if (open !== null) lines.push(line);
    } else if (name === "end") {
      assert.notEqual(open, null, `${file}: an end with no region open`);
      regions.set(open!, lines.join("\n"));
      open = null;
    } else {
      assert.equal(open, null, `${file}: region ${name} opens inside ${open}`);
      assert.ok(!regions.has(name), `${file}: region ${name} twice`);
      open = name;
      lines = [];
    }
  }
  assert.equal(open, null, `${file}: region ${String(open)} never ends`);
  return regions;
}

describe("the two socket programs", { timeout: 10_000 }, () => {
  it("hold what they do alike letter for letter: the control channel, who closed, exec, exit and the tick", () => {
    const sockets = sameInBoth("probes/apiserver_sockets.bt");
    const syscalls = sameInBoth("probes/apiserver_syscalls.bt");
    assert.deepEqual([...syscalls.keys()], [...sockets.keys()], "the same regions, in the same order");
    assert.ok(sockets.size >= 4, `regions: ${[...sockets.keys()].join(", ")}`);
    for (const [name, text] of sockets) {
      assert.ok(text.split("\n").length >= 10, `${name} holds some of the program`);
      assert.equal(syscalls.get(name), text, `region ${name} differs between apiserver_sockets.bt and apiserver_syscalls.bt`);
    }
  });
});
