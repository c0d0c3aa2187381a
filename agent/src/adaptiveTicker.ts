// A timer that runs often only while there is work. The agent's periodic
// stages (the correlator's verdicts, the Go request lines) need a short
// period while something waits, and nothing at all on an idle node: every
// wake-up of the event loop costs Node about a hundred microseconds, and two
// 25 ms intervals alone kept an idle agent at 8 millicores (measured with
// `npm run bench:footprint`).

export interface AdaptiveTicker {
  /** Work arrived: the next run comes within busyMs. Cheap when it already does. */
  wake(): void;
  stop(): void;
}

/**
 * Runs `tick` every `busyMs` while `busy()` is true after a run, every
 * `idleMs` otherwise, and within `busyMs` of a wake(). Does not keep the
 * process alive. `now` is the clock wake() compares with (monotonic ms).
 */
export function startAdaptiveTicker(
  tick: () => void,
  busy: () => boolean,
  busyMs: number,
  idleMs: number,
  now: () => number = () => performance.now(),
): AdaptiveTicker {
  let timer: NodeJS.Timeout | undefined;
  let dueAt = 0;
  let stopped = false;
  const schedule = (ms: number): void => {
    clearTimeout(timer);
    dueAt = now() + ms;
    timer = setTimeout(run, ms);
    timer.unref();
  };
  const run = (): void => {
    try {
      tick();
    } finally {
      if (!stopped) schedule(busy() ? busyMs : idleMs);
    }
  };
  schedule(busyMs);
  return {
    wake() {
      if (!stopped && dueAt > now() + busyMs) schedule(busyMs);
    },
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
