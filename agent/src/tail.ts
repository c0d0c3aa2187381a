// `lostwrite tail`: live loss events from an agent's /events feed, one line
// each, for a person at a terminal. Silent losses (the operator's span said OK)
// are the ones to look at first, so they stand out. The agent restarting is
// normal (a DaemonSet rollout): tail reconnects with backoff, says so, and asks
// the new connection to replay what it may have missed.
import { BoundedSet } from "./boundedMap.ts";
import { styleText } from "node:util";
import { WebSocket } from "ws";
import { z } from "zod";
import type { LossEvent } from "./model.ts";
import { parseRfc3339Ns } from "./sinks/rfc3339.ts";

interface TailOptions {
  /** Print each message exactly as received instead of formatting it. */
  json: boolean;
  out: NodeJS.WritableStream;
  color: boolean;
  /** RFC 3339 time: ask the agent to replay events from then on. */
  since?: string;
  /** Connection notices and skipped messages. Default process.stderr. */
  err?: NodeJS.WritableStream;
  /** Stops tailing; runTail then resolves. */
  signal?: AbortSignal;
  /** Reconnect backoff, doubling from initial to max. Default 500 ms to 10 s. */
  backoff?: { initialMs: number; maxMs: number };
}

// How far back a reconnect asks the agent to replay, behind the newest event
// seen: events are emitted after a correlation wait, so they arrive out of
// time order by up to that window. Duplicates are skipped by content.
const RECONNECT_REPLAY_SLACK_NS = 30_000_000_000n;
const RECENT_LINES = 1024;

export async function runTail(url: string, opts: TailOptions): Promise<void> {
  const err = opts.err ?? process.stderr;
  const { initialMs, maxMs } = opts.backoff ?? { initialMs: 500, maxMs: 10_000 };
  if (opts.since !== undefined && parseRfc3339Ns(opts.since) === null) {
    throw new Error(`--since ${JSON.stringify(opts.since)} is not an RFC 3339 time (e.g. 2026-12-02T15:04:05Z)`);
  }
  const base = feedUrl(url);
  // Texts printed lately, so that a reconnect's replay does not print them twice; this
  // client has no metrics, and a text forgotten for room may only be printed again.
  const recent = new BoundedSet<string>(RECENT_LINES);
  let newestNs: bigint | null = null;
  let since = opts.since;
  let delayMs = initialMs;
  let reconnecting = false;
  const stopped = (): boolean => opts.signal?.aborted === true;

  const onMessage = (text: string): void => {
    if (recent.has(text)) return;
    recent.add(text);
    const parsed = parseLossEvent(text);
    if (!parsed.ok) {
      err.write(`lostwrite tail: skipped a message that is not a loss event: ${parsed.error}\n`);
      if (opts.json) opts.out.write(text + "\n");
      return;
    }
    const timeNs = parseRfc3339Ns(parsed.event.time);
    if (timeNs !== null && (newestNs === null || timeNs > newestNs)) newestNs = timeNs;
    opts.out.write((opts.json ? text : formatEventLine(parsed.event, opts.color)) + "\n");
  };

  while (!stopped()) {
    const address = since === undefined ? base : `${base}${base.includes("?") ? "&" : "?"}since=${encodeURIComponent(since)}`;
    const outcome = await connectOnce(address, onMessage, opts.signal, () => {
      err.write(`lostwrite tail: ${reconnecting ? "reconnected to" : "connected to"} ${base}\n`);
      delayMs = initialMs;
    });
    if (stopped()) return;
    if (outcome.code === 1008) {
      throw new Error(`the agent refused the feed: ${outcome.reason || `close code ${outcome.code}`}`);
    }
    const why = outcome.error ?? (outcome.reason !== "" ? `${outcome.code} ${outcome.reason}` : `close code ${outcome.code}`);
    err.write(
      `lostwrite tail: ${outcome.opened ? "lost connection to" : "cannot connect to"} ${base} (${why}); reconnecting in ${(delayMs / 1000).toFixed(1)} s\n`,
    );
    await sleep(delayMs, opts.signal);
    delayMs = Math.min(delayMs * 2, maxMs);
    reconnecting = true;
    if (newestNs !== null) since = nsToIso(newestNs - RECONNECT_REPLAY_SLACK_NS);
  }
}

interface ConnectionOutcome {
  opened: boolean;
  code: number;
  reason: string;
  error: string | null;
}

function connectOnce(
  address: string,
  onMessage: (text: string) => void,
  signal: AbortSignal | undefined,
  onOpen: () => void,
): Promise<ConnectionOutcome> {
  return new Promise((resolve) => {
    const outcome: ConnectionOutcome = { opened: false, code: 1006, reason: "", error: null };
    const ws = new WebSocket(address, { handshakeTimeout: 5000, maxPayload: 16 * 1024 * 1024 });
    const abort = (): void => ws.close(1000, "tail stopped");
    signal?.addEventListener("abort", abort, { once: true });
    ws.on("open", () => {
      outcome.opened = true;
      onOpen();
    });
    ws.on("message", (data: Buffer, isBinary: boolean) => {
      if (!isBinary) onMessage(data.toString("utf8"));
    });
    ws.on("error", (e: Error) => {
      outcome.error = e.message;
    });
    ws.on("close", (code: number, reason: Buffer) => {
      signal?.removeEventListener("abort", abort);
      outcome.code = code;
      outcome.reason = reason.toString("utf8");
      resolve(outcome);
    });
  });
}

/** ws:// URL of the feed from what a user types: host:port, http(s)://host:port, or a full ws(s):// URL. */
export function feedUrl(input: string): string {
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(input) ? input : `ws://${input}`;
  const url = new URL(withScheme);
  if (url.protocol === "http:") url.protocol = "ws:";
  else if (url.protocol === "https:") url.protocol = "wss:";
  else if (url.protocol !== "ws:" && url.protocol !== "wss:") {
    throw new Error(`tail URL ${JSON.stringify(input)}: want ws://, wss://, http:// or https://`);
  }
  if (url.pathname === "/" || url.pathname === "") url.pathname = "/events";
  return url.toString();
}

/** Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org). */
export function shouldColor(stream: NodeJS.WritableStream, env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== "") return false;
  return (stream as { isTTY?: boolean }).isTTY === true;
}

type Format = Parameters<typeof styleText>[0];

const CAUSE_STYLE: Record<string, Format> = {
  write_failed: "red",
  connection_reset: "redBright",
  connection_closed_unanswered: "yellow",
  zero_byte_write: "yellowBright",
  connect_failed: "magenta",
  http_rejected: "cyan",
};
const CAUSE_WIDTH = "connection_closed_unanswered".length;

/**
 * One terminal line per loss event:
 *   time  cause  namespace/pod | process[pid]  errno  controller Kind ns/name  noticed  trace=id
 * Unknown values print as "-".
 */
export function formatEventLine(event: LossEvent, color: boolean): string {
  const style = (format: Format, text: string): string => (color ? styleText(format, text, { validateStream: false }) : text);
  const cause = style(CAUSE_STYLE[event.cause] ?? "none", event.cause.padEnd(CAUSE_WIDTH));
  const who =
    event.pod !== null && event.pod !== ""
      ? `${event.namespace ?? "-"}/${event.pod}`
      : `${event.process ?? "-"}[${event.pid ?? "-"}]`;
  const status = event.request?.status_code;
  const errno = event.errno ?? (status !== null && status !== undefined ? `HTTP ${status}` : "-");
  const noticed =
    event.noticed === "no" ? style(["bold", "inverse", "red"], "SILENT") : event.noticed === "yes" ? "noticed" : "noticed=?";
  const trace =
    event.correlation === "ambiguous"
      ? `ambiguous(${event.candidates?.length ?? "?"})`
      : `trace=${event.trace_id ?? "-"}`;
  return [style("dim", event.time), cause, who, errno, reconcileText(event), noticed, trace].join("  ");
}

function reconcileText(event: LossEvent): string {
  const r = event.reconcile;
  if (r === null) return "-";
  const object = r.name === null ? "-" : r.namespace !== null && r.namespace !== "" ? `${r.namespace}/${r.name}` : r.name;
  return `${r.controller ?? "-"} ${r.kind ?? "-"} ${object}`;
}

// What tail needs of a message to print it; the agent may add fields.
const nullableString = z.string().nullable();
const lossEventMessage = z.looseObject({
  kind: z.literal("status_write_lost"),
  time: z.string(),
  cause: z.string(),
  namespace: nullableString,
  pod: nullableString,
  process: nullableString,
  pid: z.number().nullable(),
  errno: nullableString,
  noticed: z.string(),
  correlation: z.string(),
  trace_id: nullableString,
  reconcile: z
    .looseObject({ controller: nullableString, namespace: nullableString, name: nullableString, kind: nullableString })
    .nullable(),
  request: z.looseObject({ status_code: z.number().nullable() }).nullable(),
  candidates: z.array(z.unknown()).optional(),
});

function parseLossEvent(text: string): { ok: true; event: LossEvent } | { ok: false; error: string } {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { ok: false, error: `not JSON: ${JSON.stringify(text.slice(0, 80))}` };
  }
  const result = lossEventMessage.safeParse(json);
  if (!result.success) {
    const issue = result.error.issues[0];
    const key = issue?.path.join(".") ?? "";
    return { ok: false, error: `${key || "message"}: ${issue?.message ?? "invalid"}` };
  }
  // Validated for every field formatEventLine reads; the rest is passed through.
  return { ok: true, event: result.data as unknown as LossEvent };
}

function nsToIso(ns: bigint): string {
  return new Date(Number(ns / 1_000_000n)).toISOString();
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted === true) return resolve();
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
