// The live agent's one timer for the loss graph. It moves the graph's clock
// to the kernel's time now (bpftrace's nsecs is CLOCK_MONOTONIC, which
// hrtime reads): every TICK_MS while something waits in the graph, once a
// second otherwise, and within TICK_MS of something starting to wait. An
// idle node costs one wake-up a second (adaptiveTicker.ts). The tick bounds
// how late a loss that waited out its window reaches the sinks (measured
// with a 250 ms tick: window + 77 ms median, + 266 ms at worst).
import { startAdaptiveTicker, type AdaptiveTicker } from "../adaptiveTicker.ts";
import type { Stage } from "../stage.ts";
import type { AgentMetrics } from "../telemetry/metrics.ts";
import { TICK_MS } from "./graphClock.ts";
import type { LossGraph } from "./lossGraph.ts";

interface LiveClockOptions {
  /** Report how many Go lines wait (lostwrite_queue_length{queue="goRequests"}): with Go probes. */
  goQueueGauge: boolean;
  metrics: AgentMetrics;
  nowNs?: () => bigint;
}

/** Started, the graph's clock runs; stopped, everything still waiting in the graph is let out. */
export function liveClockStage(graph: Pick<LossGraph, "advance" | "busy" | "onWaiting" | "flush" | "goLinesWaiting">, opts: LiveClockOptions): Stage {
  const nowNs = opts.nowNs ?? (() => process.hrtime.bigint());
  let ticker: AdaptiveTicker | null = null;
  return {
    name: "loss graph clock",
    start() {
      ticker = startAdaptiveTicker(
        () => {
          graph.advance(nowNs());
          if (opts.goQueueGauge) opts.metrics.queueLength.set({ queue: "goRequests" }, graph.goLinesWaiting);
        },
        () => graph.busy,
        TICK_MS,
        1000,
      );
      const started = ticker;
      graph.onWaiting(() => started.wake());
    },
    stop() {
      ticker?.stop();
      ticker = null;
      graph.flush();
    },
  };
}
