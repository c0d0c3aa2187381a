import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { captureLines } from "../captureLines.ts";
import { createLogger } from "../../../src/telemetry/log.ts";


void describe("logger", () => {
  void it("prints one JSON line with level, time, msg and the fields", () => {
    const { out, lines } = captureLines();
    const log = createLogger(out, { now: () => Date.parse("2026-12-02T15:04:05.000Z") });
    log.info("agent started", { listen: "127.0.0.1:9470" });
    log.error("probe exited", { code: 1, err: new Error("boom"), t: 12n });
    assert.deepEqual(lines(), [
      { level: "info", time: "2026-12-02T15:04:05.000Z", msg: "agent started", listen: "127.0.0.1:9470" },
      { level: "error", time: "2026-12-02T15:04:05.000Z", msg: "probe exited", code: 1, err: { name: "Error", message: "boom" }, t: "12" },
    ]);
  });

  void it("logs a rate-limited key once per interval and reports what it held back", () => {
    const { out, lines } = captureLines();
    let now = 0;
    const log = createLogger(out, { intervalMs: 1000, now: () => now });
    log.warnRateLimited("parse", "bad probe line", { line: 1 });
    log.warnRateLimited("parse", "bad probe line", { line: 2 });
    log.warnRateLimited("parse", "bad probe line", { line: 3 });
    log.warnRateLimited("other", "another problem");
    now = 999;
    log.warnRateLimited("parse", "bad probe line", { line: 4 });
    now = 1000;
    log.warnRateLimited("parse", "bad probe line", { line: 5 });
    now = 2500;
    log.warnRateLimited("parse", "bad probe line", { line: 6 });

    const got = lines().map(({ msg, line, suppressed }) => ({ msg, line, suppressed }));
    assert.deepEqual(got, [
      { msg: "bad probe line", line: 1, suppressed: undefined },
      { msg: "another problem", line: undefined, suppressed: undefined },
      { msg: "bad probe line", line: 5, suppressed: 3 },
      { msg: "bad probe line", line: 6, suppressed: undefined },
    ]);
  });

  void it("warnOnce logs a key once, and forgets the oldest key past maxKeys", () => {
    const { out, lines } = captureLines();
    const log = createLogger(out, { maxKeys: 2 });
    log.warnOnce("a", "a");
    log.warnOnce("a", "a");
    log.warnOnce("b", "b");
    log.warnOnce("c", "c"); // forgets "a"
    log.warnOnce("a", "a");
    assert.deepEqual(
      lines().map((l) => l.msg),
      ["a", "b", "c", "a"],
    );
  });

  void it("does not throw on a cyclic field", () => {
    const { out, lines } = captureLines();
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    createLogger(out).warn("odd", { cyclic });
    assert.equal(lines()[0]?.msg, "odd");
  });
});
