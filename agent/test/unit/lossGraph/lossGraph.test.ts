// The loss graph, for failed sends: the kernel counts every
// one (@failed_sends) and prints only a dead socket's first, so the failed
// syscall counter comes from the counter print alone (a printed send is not
// counted twice), and a printed send is one loss event.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { loadConfig } from "../../../src/config.ts";
import { MonotonicClock } from "../../../src/correlate/monotonicClock.ts";
import { GraphClock } from "../../../src/lossGraph/graphClock.ts";
import { LossGraph } from "../../../src/lossGraph/lossGraph.ts";
import type { LossEvent } from "../../../src/model.ts";
import { AgentMetrics } from "../../../src/telemetry/metrics.ts";
import { parseProbeLine } from "../../../src/sources/probe/probeOutput.ts";

const PID = 3331;

function graph() {
  const metrics = new AgentMetrics();
  const events: LossEvent[] = [];
  const config = loadConfig([{ name: "test", values: { "node-name": "n1", "correlation-window": "0ms", "span-grace": "0ms" } }]);
  const built = new LossGraph({
    config,
    metrics,
    clock: MonotonicClock.fixed(0n),
    time: new GraphClock(0n, () => 1_000_000),
    processes: { identity: (pid) => ({ comm: "python3", nsPids: [pid], sinceMs: 0, identity: { pid, process: "python3", namespace: "", pod: "", container: "", controller: "" } }) },
    goRequests: false,
    requestLevelSends: false,
    sink: { name: "test", publish: (event) => events.push(event) },
  });
  const feed = (line: string): void => {
    const parsed = parseProbeLine(line);
    assert.ok(parsed.ok, line);
    built.addRecord(parsed.record);
  };
  const syscallErrors = async (errno: string): Promise<number> =>
    (await metrics.syscallErrors.get()).values.filter((v) => v.labels.errno === errno && v.labels.syscall === "sendto").reduce((sum, v) => sum + v.value, 0);
  return { built, events, feed, syscallErrors };
}

describe("failed sends through the loss graph", { timeout: 10_000 }, () => {
  it("counts failed sends from the kernel's counter only, exactly, and a dead socket's first failure as one loss", async () => {
    const { built, events, feed, syscallErrors } = graph();
    feed(`{"type": "printf", "data": "send 1000 ${PID} ${PID} 44 -104 6443 127.0.0.1 77 python3\\n"}`);
    feed(`{"type": "map", "data": {"@failed_sends": {"${PID},44,104": 1, "${PID},44,32": 243399, "${PID},44,0": 2}}}`);
    built.advance(25_000_000n);
    assert.equal(await syscallErrors("ECONNRESET"), 1, "the printed send is not counted on top of the kernel's count");
    assert.equal(await syscallErrors("EPIPE"), 243_399);
    assert.equal(await syscallErrors("none"), 2, "errno 0 is a zero-byte send");
    // The next print adds only the growth.
    feed(`{"type": "map", "data": {"@failed_sends": {"${PID},44,104": 1, "${PID},44,32": 243400, "${PID},44,0": 2}}}`);
    assert.equal(await syscallErrors("EPIPE"), 243_400);
    assert.deepEqual(events.map((e) => [e.cause, e.errno]), [["write_failed", "ECONNRESET"]]);
  });

  it("judges a close the client made with a request unanswered as the client giving up", () => {
    const { built, events, feed } = graph();
    feed(`{"type": "printf", "data": "close 2000 ${PID} ${PID} 0 0 1 1834 1500000000 0 6443 127.0.0.1 77 python3\\n"}`);
    feed(`{"type": "printf", "data": "close 3000 ${PID} ${PID} 0 0 2 1834 1000 0 6443 127.0.0.1 77 python3\\n"}`);
    built.advance(25_000_000n);
    assert.deepEqual(events.map((e) => e.cause), ["client_gave_up", "connection_closed_unanswered"]);
  });
});
