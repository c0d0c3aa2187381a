import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { stage, startStages } from "../../src/stage.ts";

describe("stages", { timeout: 10_000 }, () => {
  const quiet = { warn: () => {} };

  it("start in the declared order and stop in the reverse one", async () => {
    const log: string[] = [];
    const stages = ["a", "b", "c"].map((name) =>
      stage(
        name,
        () => void log.push(`start ${name}`),
        () => void log.push(`stop ${name}`),
      ),
    );
    const stop = await startStages(stages, quiet);
    await stop();
    assert.deepEqual(log, ["start a", "start b", "start c", "stop c", "stop b", "stop a"]);
    await stop(); // a second stop stops nothing twice
    assert.equal(log.length, 6);
  });

  it("a stage that fails to start stops those started before it, and the error names it", async () => {
    const log: string[] = [];
    const stages = [
      stage("http", () => void log.push("start http"), () => void log.push("stop http")),
      stage("probe", () => Promise.reject(new Error("bpftrace not attached after 60000 ms")), () => void log.push("stop probe")),
      stage("rescan", () => void log.push("start rescan")),
    ];
    await assert.rejects(startStages(stages, quiet), /^Error: probe did not start: bpftrace not attached after 60000 ms$/);
    assert.deepEqual(log, ["start http", "stop http"]);
  });

  it("a stage that fails to stop is logged with its name and the others still stop", async () => {
    const warnings: unknown[] = [];
    const stopped: string[] = [];
    const stop = await startStages(
      [
        stage("first", () => {}, () => void stopped.push("first")),
        stage("broken", () => {}, () => Promise.reject(new Error("boom"))),
      ],
      { warn: (msg, fields) => warnings.push({ msg, ...fields }) },
    );
    await stop();
    assert.deepEqual(stopped, ["first"]);
    assert.deepEqual(warnings, [{ msg: "stage did not stop cleanly", stage: "broken", error: "Error: boom" }]);
  });
});
