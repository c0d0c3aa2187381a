// The live agent's one timer for the loss graph: it moves the graph to the
// kernel's time now, comes back within a tick when the graph says something
// waits, and lets everything out when it stops.
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, it } from "node:test";
import { liveClockStage } from "../../../src/lossGraph/liveClock.ts";
import { AgentMetrics } from "../../../src/telemetry/metrics.ts";

/** Waits until `done()` holds, polling; a busy machine may run timers late. */
async function waitFor(done: () => boolean): Promise<void> {
  for (let i = 0; i < 400 && !done(); i++) await sleep(5);
}

function fakeGraph() {
  const calls: string[] = [];
  let wake = (): void => {};
  return {
    calls,
    wake: () => wake(),
    graph: {
      busy: false,
      goLinesWaiting: 3,
      advance: (nowNs: bigint) => void calls.push(`advance ${nowNs}`),
      flush: () => void calls.push("flush"),
      onWaiting: (listener: () => void) => {
        wake = listener;
      },
    },
  };
}

describe("the loss graph's live clock", () => {
  it("advances the graph to the kernel time now, reports the Go lines waiting, and flushes it when stopped", async () => {
    const { graph, calls } = fakeGraph();
    const metrics = new AgentMetrics();
    const stage = liveClockStage(graph, { goQueueGauge: true, metrics, nowNs: () => 42n });
    await stage.start();
    await waitFor(() => calls.length > 0);
    await stage.stop();
    assert.deepEqual(calls, ["advance 42", "flush"]);
    assert.match(await metrics.text(), /lostwrite_queue_length\{queue="goRequests"\} 3/);
  });

  it("comes back within a tick when something starts waiting", async () => {
    const { graph, calls, wake } = fakeGraph();
    const stage = liveClockStage(graph, { goQueueGauge: false, metrics: new AgentMetrics(), nowNs: () => 7n });
    await stage.start();
    await waitFor(() => calls.length > 0);
    // Idle, the next run is a second away; woken, it comes within a tick or so.
    const wokenAt = performance.now();
    wake();
    await waitFor(() => calls.length > 1);
    const waitedMs = performance.now() - wokenAt;
    await stage.stop();
    assert.deepEqual(calls, ["advance 7", "advance 7", "flush"]);
    assert.ok(waitedMs < 500, `woken, it ran ${waitedMs} ms later`);
  });
});
