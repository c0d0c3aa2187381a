import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { describe, it } from "node:test";
import { captureLines } from "../captureLines.ts";
import { createEventLog } from "../../../src/sinks/eventLog.ts";
import { AgentMetrics } from "../../../src/telemetry/metrics.ts";
import { sampleEvent } from "./sampleEvent.ts";


void describe("event log", () => {
  void it("writes each loss event as exactly one line of the event schema", () => {
    const { out, raw } = captureLines();
    const log = createEventLog(out, { metrics: new AgentMetrics() });
    const a = sampleEvent();
    const b = sampleEvent({ noticed: "yes", trace_id: null, span_id: null, correlation: "none" });
    log.write(a);
    log.write(b);
    assert.equal(raw(), JSON.stringify(a) + "\n" + JSON.stringify(b) + "\n");
  });

  void it("drops events, counted, when the stream stops draining", async () => {
    // A stream that never finishes a write holds everything in writableLength.
    const stuck = new Writable({ highWaterMark: 16, write: () => {} });
    const metrics = new AgentMetrics();
    const log = createEventLog(stuck, { metrics, maxBufferedBytes: 4096 });
    for (let i = 0; i < 100; i++) log.write(sampleEvent({ pid: i }));
    assert.ok(stuck.writableLength <= 4096, `stream holds ${stuck.writableLength} bytes`);
    const dropped = (await metrics.eventsDropped.get()).values.find((v) => v.labels.stage === "log")?.value ?? 0;
    const kept = Math.floor(4096 / (JSON.stringify(sampleEvent()).length + 1));
    assert.ok(dropped >= 100 - kept - 1 && dropped < 100, `dropped ${dropped}`);
  });
});
