// Writes the agent's inputs to a `--record` file while it runs. Recording is a
// side output: it must never slow or stop the data path. Records wait in a
// bounded queue (by count and by bytes) for the disk; past either bound, or
// after a write error, records are dropped and counted in
// lostwrite_events_dropped_total{stage="record"}.
import { once } from "node:events";
import { open } from "node:fs/promises";
import type { WriteStream } from "node:fs";
import type { Logger } from "../../telemetry/log.ts";
import type { AgentMetrics } from "../../telemetry/metrics.ts";
import { RECORD_FORMAT_VERSION, serializeRecord, type DataRecord, type HeaderRecord, type RecordedSender, type RecordEntry } from "./format.ts";

interface RecordWriterOptions {
  header: {
    node: string;
    clockOffsetNs: bigint;
    recordedAt: string;
    agent: { version: string; config: Record<string, unknown> };
    /** Default: now(). */
    t?: bigint;
  };
  metrics: AgentMetrics;
  logger?: Logger;
  /** Records waiting for the disk. Default 10,000. */
  capacity?: number;
  /** Bytes waiting for the disk. Default 64 MiB. */
  maxQueuedBytes?: number;
  /** CLOCK_MONOTONIC ns for records written without `t`. Default process.hrtime.bigint. */
  now?: () => bigint;
}

export interface RecordWriter {
  probeLine(line: string, t?: bigint): void;
  /** An accepted OTLP body, with who held its connection when that was judged. */
  spans(peer: string, contentType: string, body: Uint8Array, t?: bigint, sender?: RecordedSender): void;
  clock(clockOffsetNs: bigint, t?: bigint): void;
  /** A line of a Go program's bpftrace. */
  goProbeLine(line: string, t?: bigint): void;
  /** The Go program of `pid` attached (following it since kernel time `since`) or went away. */
  goAttached(pid: number, attached: boolean, since?: bigint, t?: bigint): void;
  /** A line of a TLS program's bpftrace. */
  tlsProbeLine(line: string, t?: bigint): void;
  /** The TLS program of `pid` attached (following it since kernel time `since`) or went away. */
  tlsAttached(pid: number, attached: boolean, since?: bigint, t?: bigint): void;
  /** A process became a target under the name `process`, or is no target any more. */
  target(pid: number, process: string, added: boolean, t?: bigint): void;
  /** Records dropped so far (queue full or file failed). */
  readonly dropped: number;
  /** Resolves when everything accepted so far is on its way to the disk. */
  flush(): Promise<void>;
  close(): Promise<void>;
}

const QUEUE_NAME = "record_writer";

/** Creates (truncates) `path` and writes the header. Rejects, naming the path, if the file cannot be opened. */
export async function openRecordWriter(path: string, opts: RecordWriterOptions): Promise<RecordWriter> {
  const now = opts.now ?? (() => process.hrtime.bigint());
  const capacity = opts.capacity ?? 10_000;
  const maxQueuedBytes = opts.maxQueuedBytes ?? 64 * 1024 * 1024;
  const { metrics, logger } = opts;

  let stream: WriteStream;
  try {
    stream = (await open(path, "w")).createWriteStream();
  } catch (err) {
    throw new Error(`--record ${JSON.stringify(path)}: cannot open for writing: ${(err as Error).message}`, { cause: err });
  }

  let pending = 0;
  let dropped = 0;
  let failed = false;
  let closing = false;
  const flushWaiters: (() => void)[] = [];

  metrics.queueLength.set({ queue: QUEUE_NAME }, 0);
  metrics.eventsDropped.inc({ stage: "record", reason: "queue_full" }, 0);

  stream.on("error", (err) => {
    if (!failed) logger?.error("recording stopped: writing the record file failed", { path, err });
    failed = true;
    // Nothing queued will be written now; release whoever waits for it.
    pending = 0;
    metrics.queueLength.set({ queue: QUEUE_NAME }, 0);
    for (const resolve of flushWaiters.splice(0)) resolve();
  });

  function written(): void {
    if (failed) return;
    pending--;
    metrics.queueLength.set({ queue: QUEUE_NAME }, pending);
    if (pending === 0) for (const resolve of flushWaiters.splice(0)) resolve();
  }

  function drop(): void {
    dropped++;
    metrics.eventsDropped.inc({ stage: "record", reason: "queue_full" });
    logger?.warnRateLimited("record:dropped", "record queue full: records dropped", { path, dropped });
  }

  function write(record: RecordEntry): void {
    if (closing) return;
    if (failed || pending >= capacity || stream.writableLength >= maxQueuedBytes) return drop();
    pending++;
    metrics.queueLength.set({ queue: QUEUE_NAME }, pending);
    stream.write(serializeRecord(record) + "\n", written);
  }

  const header: HeaderRecord = {
    kind: "header",
    t: opts.header.t ?? now(),
    version: RECORD_FORMAT_VERSION,
    node: opts.header.node,
    clockOffsetNs: opts.header.clockOffsetNs,
    recordedAt: opts.header.recordedAt,
    agent: opts.header.agent,
  };
  write(header);

  const flush = (): Promise<void> =>
    pending === 0 || failed ? Promise.resolve() : new Promise<void>((resolve) => flushWaiters.push(resolve));

  const data = (record: DataRecord): void => write(record);

  return {
    probeLine: (line, t) => data({ kind: "probe", t: t ?? now(), line }),
    spans: (peer, contentType, body, t, sender) =>
      data({
        kind: "spans",
        t: t ?? now(),
        peer,
        contentType,
        body: Buffer.from(body.buffer, body.byteOffset, body.byteLength),
        ...(sender ? { sender } : {}),
      }),
    clock: (clockOffsetNs, t) => data({ kind: "clock", t: t ?? now(), clockOffsetNs }),
    goProbeLine: (line, t) => data({ kind: "goProbe", t: t ?? now(), line }),
    goAttached: (pid, attached, since, t) => data({ kind: "goAttached", t: t ?? now(), pid, attached, ...(since !== undefined ? { since } : {}) }),
    tlsProbeLine: (line, t) => data({ kind: "tlsProbe", t: t ?? now(), line }),
    tlsAttached: (pid, attached, since, t) => data({ kind: "tlsAttached", t: t ?? now(), pid, attached, ...(since !== undefined ? { since } : {}) }),
    target: (pid, process, added, t) => data({ kind: "target", t: t ?? now(), pid, process, added }),
    get dropped() {
      return dropped;
    },
    flush,
    async close() {
      if (closing) return;
      closing = true;
      await flush();
      if (stream.destroyed) return;
      stream.end();
      await once(stream, "close").catch(() => {});
    },
  };
}
