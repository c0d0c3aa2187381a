// What the agent is made of: stages that start in a declared order and stop
// in the reverse one. A stage that fails to start stops the ones started
// before it; a stage that fails to stop does not keep the others running.
import type { LossMeta } from "./correlate/correlator.ts";
import type { LossEvent } from "./model.ts";

export interface Stage {
  /** Names the stage in logs and in a start-up error. */
  readonly name: string;
  start(): Promise<void> | void;
  stop(): Promise<void> | void;
}

/** Where emitted loss events go: the event log, the feed, the trace exporter, in-process listeners. */
export interface LossSink {
  readonly name: string;
  publish(event: LossEvent, meta: LossMeta): void;
}

/** Every sink, in the order given: each loss event goes to all of them. */
export class LossSinks implements LossSink {
  readonly name = "sinks";
  readonly #sinks: readonly LossSink[];

  constructor(sinks: readonly LossSink[]) {
    this.#sinks = sinks;
  }

  publish(event: LossEvent, meta: LossMeta): void {
    for (const sink of this.#sinks) sink.publish(event, meta);
  }
}

interface StageLog {
  warn(msg: string, fields?: Record<string, unknown>): void;
}

/** Starts every stage in order; resolves to what stops them all, in reverse. */
export async function startStages(stages: readonly Stage[], log: StageLog): Promise<() => Promise<void>> {
  const started: Stage[] = [];
  const stopAll = async (): Promise<void> => {
    for (const stage of started.splice(0).reverse()) {
      try {
        await stage.stop();
      } catch (err) {
        log.warn("stage did not stop cleanly", { stage: stage.name, error: String(err) });
      }
    }
  };
  for (const stage of stages) {
    try {
      await stage.start();
    } catch (err) {
      await stopAll();
      throw new Error(`${stage.name} did not start: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
    started.push(stage);
  }
  return stopAll;
}

/** A stage from two functions, for parts that are not classes of their own. */
export function stage(name: string, start: () => Promise<void> | void, stop: () => Promise<void> | void = () => {}): Stage {
  return { name, start, stop };
}
