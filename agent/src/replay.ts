// `lostwrite replay FILE`: the loss stages of the live agent fed from a
// --record file instead of bpftrace and the OTLP port. No root, no bpftrace,
// no network. Time is the recording's: the correlator's clock advances with
// the records' CLOCK_MONOTONIC stamps and ticks every 250 ms of recorded time,
// as the live agent's does, so a recording replays to the same events.
import { loadConfig } from "./config.ts";
import { MonotonicClock } from "./correlate/monotonicClock.ts";
import type { LossEvent } from "./model.ts";
import { buildLossStages } from "./lossStages.ts";
import { AgentMetrics } from "./sinks/metrics.ts";
import { parseProbeLine } from "./sources/probe/probeOutput.ts";
import { openRecordReader } from "./sources/record/reader.ts";
import { decodeTraceBody } from "./sources/spans/spanIntake.ts";
import { formatEventLine, shouldColor } from "./tail.ts";

const TICK_NS = 250_000_000n;

export interface ReplayOptions {
  json: boolean;
  out: NodeJS.WritableStream;
  err?: NodeJS.WritableStream;
}

/** Loss events of a recording, in the order the live agent would emit them. */
export async function replayEvents(file: string, err: NodeJS.WritableStream): Promise<{ events: LossEvent[]; badRecords: number }> {
  const reader = await openRecordReader(file, {
    onBadRecord: ({ line, message }) => err.write(`lostwrite replay: ${file}:${line}: ${message} (skipped)\n`),
  });
  const { header } = reader;
  const recorded = header.agent.config;
  const ms = (key: string, fallback: number): string => `${typeof recorded[key] === "number" ? recorded[key] : fallback}ms`;
  const config = loadConfig([
    {
      name: `recording "${file}"`,
      values: {
        "node-name": header.node,
        "correlation-window": ms("correlation-window", 10_000),
        "span-grace": ms("span-grace", 60_000),
        "unanswered-min-bytes": recorded["unanswered-min-bytes"] ?? 64,
      },
    },
  ]);
  const clock = MonotonicClock.fixed(header.clockOffsetNs);
  let nowNs = header.t;
  const wallMs = (): number => Number(clock.toWallNs(nowNs) / 1_000_000n);
  // Replay has no /proc: a process is known by the comm its events carry, and
  // its spans' process.pid is taken to be the host pid (true outside pods).
  const comms = new Map<number, string>();
  // When each pid was first seen: the live agent made it a target about then.
  const firstSeenMs = new Map<number, number>();
  const events: LossEvent[] = [];
  const stages = buildLossStages({
    config,
    metrics: new AgentMetrics(),
    clock,
    now: wallMs,
    identity: (pid) => {
      const comm = comms.get(pid);
      if (comm === undefined) return undefined;
      return { comm, nsPids: [pid], sinceMs: firstSeenMs.get(pid) ?? 0, identity: { pid, process: comm, namespace: "", pod: "", container: "", controller: "" } };
    },
    emit: (event) => events.push(event),
  });

  let nextTick = nowNs + TICK_NS;
  const advanceTo = (t: bigint): void => {
    while (nextTick <= t) {
      nowNs = nextTick;
      stages.correlator.tick();
      nextTick += TICK_NS;
    }
    nowNs = t;
  };

  for await (const record of reader.records()) {
    advanceTo(record.t);
    if (record.kind === "clock") continue; // the live agent's correlator saw the offset it had when the spans came
    if (record.kind === "probe") {
      const parsed = parseProbeLine(record.line);
      if (!parsed.ok) continue;
      const probeRecord = parsed.record;
      if (probeRecord.type === "hello") stages.counters.reset();
      if ("comm" in probeRecord && "pid" in probeRecord) {
        comms.set(probeRecord.pid, probeRecord.comm);
        if (!firstSeenMs.has(probeRecord.pid)) firstSeenMs.set(probeRecord.pid, wallMs());
      }
      stages.handleRecord(probeRecord);
    } else {
      try {
        stages.correlator.addSpans(decodeTraceBody(record.contentType, record.body, record.peer || null));
      } catch (error) {
        err.write(`lostwrite replay: spans at t=${record.t}: ${String(error)} (skipped)\n`);
      }
    }
  }
  stages.correlator.flush();
  return { events, badRecords: reader.badRecords };
}

export async function runReplay(file: string, opts: ReplayOptions): Promise<number> {
  const err = opts.err ?? process.stderr;
  let result: Awaited<ReturnType<typeof replayEvents>>;
  try {
    result = await replayEvents(file, err);
  } catch (error) {
    err.write(`lostwrite replay: ${error instanceof Error ? error.message : String(error)}\n`);
    return 2;
  }
  const color = !opts.json && shouldColor(opts.out);
  for (const event of result.events) opts.out.write(opts.json ? `${JSON.stringify(event)}\n` : `${formatEventLine(event, color)}\n`);
  err.write(`lostwrite replay: ${result.events.length} loss event(s) from ${file}${result.badRecords ? `, ${result.badRecords} bad record(s) skipped` : ""}\n`);
  return 0;
}
