import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseDemoOptions } from "../../../src/demo/runDemo.ts";

describe("demo options", () => {
  it("takes durations with a unit and defaults --listen", () => {
    assert.deepEqual(parseDemoOptions({ duration: "45s" }), { duration: 45_000, listen: "127.0.0.1:9470", install: true });
    assert.equal(parseDemoOptions({ install: false }).install, false);
    assert.equal(parseDemoOptions({ duration: "1m" }).duration, 60_000);
  });

  it("names the flag and the value it rejects", () => {
    assert.throws(() => parseDemoOptions({ duration: "soon" }), /--duration "soon": expected a duration/);
    assert.throws(() => parseDemoOptions({ listen: "9470" }), /--listen "9470": expected ADDR:PORT/);
  });
});
