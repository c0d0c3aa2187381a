// `lostwrite replay FILE`: the live agent's loss graph fed from a --record
// file instead of bpftrace and the OTLP port. No root, no bpftrace, no
// network. Time is the recording's: the graph's clock advances to each
// record's CLOCK_MONOTONIC stamp before the record goes in, through the same
// advance() the live agent's timer calls, so a recording replays to the same
// events in the same order. Go and TLS programs' lines and attachments go in
// as the live agent's did.
import { loadConfig } from "./config.ts";
import { MonotonicClock } from "./correlate/monotonicClock.ts";
import type { LossEvent } from "./model.ts";
import { formatHostPort } from "./hostPort.ts";
import { GraphClock } from "./lossGraph/graphClock.ts";
import { LossGraph } from "./lossGraph/lossGraph.ts";
import { LossMetricsSink } from "./sinks/lossMetrics.ts";
import { LossSinks } from "./stage.ts";
import { isGoRecord } from "./sources/goHttp2/goRequests.ts";
import { parseEndpoint } from "./sources/probe/endpointKey.ts";
import { AgentMetrics } from "./telemetry/metrics.ts";
import { parseProbeLine } from "./sources/probe/probeOutput.ts";
import { openRecordReader } from "./sources/record/reader.ts";
import { decodeTraceBody, judgeRecordedSpans } from "./sources/spans/spanIntake.ts";
import { formatEventLine, shouldColor } from "./tail.ts";

interface ReplayOptions {
  json: boolean;
  out: NodeJS.WritableStream;
  err?: NodeJS.WritableStream;
}

/**
 * The apiservers of a recording: the configured ones, and every peer its
 * socket probe printed (that probe prints nothing else), so that replay
 * follows the Go requests to them, as the live agent did. An endpoint
 * discovered in Kubernetes that no socket line names is not known here.
 */
async function recordedApiservers(file: string, configured: unknown): Promise<Set<string>> {
  const known = new Set<string>();
  for (const value of Array.isArray(configured) ? configured : []) {
    try {
      known.add(parseEndpoint(String(value)).text);
    } catch {
      // reported by the live agent when it started; nothing to follow here
    }
  }
  const reader = await openRecordReader(file, { onBadRecord: () => {} });
  for await (const record of reader.records()) {
    if (record.kind !== "probe") continue;
    const parsed = parseProbeLine(record.line);
    if (parsed.ok && "addr" in parsed.record && "port" in parsed.record && !isGoRecord(parsed.record)) {
      known.add(formatHostPort(parsed.record.addr, parsed.record.port));
    }
  }
  return known;
}

/** Loss events of a recording, in the order the live agent would emit them. */
export async function replayEvents(file: string, err: NodeJS.WritableStream): Promise<{ events: LossEvent[]; badRecords: number; metrics: AgentMetrics }> {
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
  // The recording's time: the graph's decisions and the exemplars' stamps fall where the live agent's did.
  const time = new GraphClock(header.t, (nowNs) => Number(clock.toWallNs(nowNs) / 1_000_000n));
  // Replay has no /proc: a process is known by the comm its lines carry, and
  // its spans' process.pid is taken to be the host pid (true outside pods).
  const comms = new Map<number, string>();
  /** Pids the recording names (its `target` records): their lines' comms do not rename them. */
  const named = new Set<number>();
  // When each pid was first seen: the live agent made it a target about then.
  const firstSeenMs = new Map<number, number>();
  const events: LossEvent[] = [];
  const apiservers = await recordedApiservers(file, recorded.apiserver);
  // What the graph counts, as the live agent's /metrics would show it.
  const metrics = new AgentMetrics({ now: () => time.wallMs() });
  const processes = {
    identity: (pid: number) => {
      const comm = comms.get(pid);
      if (comm === undefined) return undefined;
      return { comm, nsPids: [pid], sinceMs: firstSeenMs.get(pid) ?? 0, identity: { pid, process: comm, namespace: "", pod: "", container: "", controller: "" } };
    },
  };
  const graph = new LossGraph({
    config,
    metrics,
    clock,
    time,
    processes,
    apiservers: { has: (host, port) => apiservers.has(formatHostPort(host, port)) },
    // Go requests as the live agent followed them: its programs' lines and when each attached.
    goRequests: true,
    requestLevelSends: false,
    sink: new LossSinks([new LossMetricsSink(metrics, processes), { name: "replayed events", publish: (event) => events.push(event) }]),
  });

  for await (const record of reader.records()) {
    graph.advance(record.t);
    if (record.kind === "clock") {
      // The live agent turned kernel times into wall times with this offset from here on (every 60 s).
      clock.useRecordedOffset(record.clockOffsetNs);
      continue;
    }
    if (record.kind === "goAttached") {
      graph.setGoAttached(record.pid, record.attached, record.attached ? (record.since ?? record.t) : record.t);
      continue;
    }
    if (record.kind === "goProbe") {
      const parsed = parseProbeLine(record.line);
      if (parsed.ok && isGoRecord(parsed.record)) graph.addGoRecord(parsed.record);
      continue;
    }
    if (record.kind === "target") {
      if (record.added) {
        comms.set(record.pid, record.process);
        named.add(record.pid);
      }
      continue;
    }
    if (record.kind === "tlsAttached") {
      graph.addRecord({ type: "tls_attached", pid: record.pid, attached: record.attached, since: record.since ?? record.t });
      continue;
    }
    if (record.kind === "tlsProbe") {
      const parsed = parseProbeLine(record.line);
      if (parsed.ok && parsed.record.type === "tls_close") graph.addRecord(parsed.record);
      continue;
    }
    if (record.kind === "probe") {
      const parsed = parseProbeLine(record.line);
      if (!parsed.ok) continue;
      const probeRecord = parsed.record;
      if (probeRecord.type === "hello") graph.newProbeInstance();
      if ("comm" in probeRecord && "pid" in probeRecord) {
        // Named as the live agent named the target (its `target` record); in a
        // recording without those, by the comm its lines carry.
        if (!named.has(probeRecord.pid)) comms.set(probeRecord.pid, probeRecord.comm);
        if (!firstSeenMs.has(probeRecord.pid)) firstSeenMs.set(probeRecord.pid, time.wallMs());
      }
      graph.addRecord(probeRecord);
    } else {
      try {
        const spans = judgeRecordedSpans(decodeTraceBody(record.contentType, record.body, record.peer || null), record.sender, recorded.kubernetes === true);
        graph.addSpans(spans);
      } catch (error) {
        err.write(`lostwrite replay: spans at t=${record.t}: ${String(error)} (skipped)\n`);
      }
    }
  }
  graph.flush();
  return { events, badRecords: reader.badRecords, metrics };
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
