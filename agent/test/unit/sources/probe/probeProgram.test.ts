// Rendering a probe program: the agent's state goes into BEGIN after the
// program's own defaults, so what the agent renders is what the kernel uses.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseEndpoint } from "../../../../src/sources/probe/endpointKey.ts";
import { PROBE_VARIANTS, renderProgram } from "../../../../src/sources/probe/probeProgram.ts";

describe("renderProgram", { timeout: 10_000 }, () => {
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
    it(`${variant}: without a threshold keeps the program's default of 64`, () => {
      const program = renderProgram(variant, { targets: [], endpoints: [] });
      assert.equal(program.match(/@unanswered_min = /g)?.length, 1);
    });
  }
});
