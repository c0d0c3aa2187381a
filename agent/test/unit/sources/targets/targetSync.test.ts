// TargetSync: a pod whose last watched process exits keeps its series for a
// grace, so the loss that process counted just before it died is still there
// for the next scrape; a pod watched again keeps them; past the grace (or the
// capacity of pods waiting) they go.
import assert from "node:assert/strict";
import { afterEach, beforeEach, describe, it, mock } from "node:test";
import type { ProcessIdentity } from "../../../../src/model.ts";
import { recordLoss } from "../../../../src/sinks/lossMetrics.ts";
import { AgentMetrics } from "../../../../src/telemetry/metrics.ts";
import { createLogger } from "../../../../src/telemetry/log.ts";
import type { ExecAdmission } from "../../../../src/sources/targets/execAdmission.ts";
import { TargetSync } from "../../../../src/sources/targets/targetSync.ts";
import type { TargetChanges, TargetWatcher, WatchedTarget } from "../../../../src/sources/targets/targetWatcher.ts";
import { sampleEvent } from "../../sinks/sampleEvent.ts";
import { Writable } from "node:stream";

/** Moves the mocked clock past `ms`, then lets the series removal it started finish. */
async function advance(ms: number): Promise<void> {
  mock.timers.tick(ms);
  await new Promise((resolve) => setImmediate(resolve));
}

function target(pid: number, pod: string): WatchedTarget {
  const identity: Omit<ProcessIdentity, "tid"> = { pid, process: "manager", namespace: "ops", pod, container: "manager", controller: "widget" };
  return { pid, comm: "manager", cmdline: "", source: "kubernetes", identity, nsPids: null, sinceMs: 0 };
}

/** The watcher's side of TargetSync: its current targets, and the changes it announces. */
class Watched {
  current = new Map<number, WatchedTarget>();
  listener: (changes: TargetChanges) => Promise<void> = async () => {};
  onChange(listener: (changes: TargetChanges) => Promise<void>): void {
    this.listener = listener;
  }
  pids(): number[] {
    return [...this.current.keys()];
  }
  identity(pid: number): WatchedTarget | undefined {
    return this.current.get(pid);
  }
  async change(added: WatchedTarget[], removed: WatchedTarget[]): Promise<void> {
    for (const t of removed) this.current.delete(t.pid);
    for (const t of added) this.current.set(t.pid, t);
    await this.listener({ added, removed });
  }
}

async function lostCount(metrics: AgentMetrics, pod: string): Promise<number | undefined> {
  return (await metrics.statusWriteLost.get()).values.find((v) => v.labels.pod === pod && v.labels.cause === "write_failed")?.value;
}

function setUp(opts: { graceMs: number; capacity?: number }): { metrics: AgentMetrics; watched: Watched } {
  const metrics = new AgentMetrics();
  const watched = new Watched();
  const kernel = { addTarget: async () => {}, removeTarget: async () => {}, forgetCounters: async () => {} };
  const admission = { forget: () => {} } as unknown as ExecAdmission;
  new TargetSync({
    targets: watched as unknown as TargetWatcher,
    kernel,
    admission,
    syscallCounterKeys: () => [],
    forgetBaselines: () => {},
    metrics,
    log: createLogger(new Writable({ write: (_chunk, _encoding, done) => done() })),
    forgetAfterMs: 60_000,
    podSeriesGraceMs: opts.graceMs,
    ...(opts.capacity === undefined ? {} : { podSeriesCapacity: opts.capacity }),
  });
  return { metrics, watched };
}

function countLoss(metrics: AgentMetrics, pod: string): void {
  recordLoss(metrics, { ...sampleEvent(), namespace: "ops", pod, container: "manager", process: "manager", cause: "write_failed" }, "widget");
}

describe("TargetSync and a pod's series", { timeout: 30_000 }, () => {
  beforeEach(() => mock.timers.enable({ apis: ["setTimeout"] }));
  afterEach(() => mock.timers.reset());

  it("keeps a pod's loss in /metrics after its last process exits, until the grace is over", async () => {
    const { metrics, watched } = setUp({ graceMs: 300 });
    const p = target(41, "op-1");
    await watched.change([p], []);
    countLoss(metrics, "op-1");
    await watched.change([], [p]);
    assert.equal(await lostCount(metrics, "op-1"), 1, "the loss its last process counted is still scrapeable");
    await advance(300);
    assert.equal(await lostCount(metrics, "op-1"), undefined, "gone once the grace is over");
  });

  it("keeps them for good when the pod is watched again within the grace (a restarted container)", async () => {
    const { metrics, watched } = setUp({ graceMs: 300 });
    const first = target(41, "op-1");
    await watched.change([first], []);
    countLoss(metrics, "op-1");
    await watched.change([], [first]);
    await watched.change([target(42, "op-1")], []);
    await advance(300);
    assert.equal(await lostCount(metrics, "op-1"), 1);
  });

  it("past its capacity of pods waiting, the oldest loses its series at once, counted", async () => {
    const { metrics, watched } = setUp({ graceMs: 60_000, capacity: 2 });
    for (const [pid, pod] of [[1, "a"], [2, "b"], [3, "c"]] as const) {
      const t = target(pid, pod);
      await watched.change([t], []);
      countLoss(metrics, pod);
      await watched.change([], [t]);
    }
    await advance(0);
    assert.equal(await lostCount(metrics, "a"), undefined);
    assert.equal(await lostCount(metrics, "b"), 1);
    assert.equal(await lostCount(metrics, "c"), 1);
    const dropped = (await metrics.eventsDropped.get()).values.find((v) => v.labels.stage === "targets" && v.labels.reason === "capacity");
    assert.equal(dropped?.value, 1);
  });
});
