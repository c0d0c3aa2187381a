// The agent's own small logger, JSON lines. Bad input from outside is
// logged, never thrown, and a flood of the same complaint must not flood the
// log: the rate-limited forms print a key at most once per interval and say
// how many they held back.
import { BoundedMap, BoundedSet } from "../boundedMap.ts";

type LogLevel = "info" | "warn" | "error";
export type LogFields = Record<string, unknown>;

export interface Logger {
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  /** Warns under `key` at most once per interval; the next line carries `suppressed: N`. */
  warnRateLimited(key: string, msg: string, fields?: LogFields): void;
  /** Warns under `key` once for the life of the logger (bounded by `maxKeys`). */
  warnOnce(key: string, msg: string, fields?: LogFields): void;
}

interface LoggerOptions {
  /** Interval of warnRateLimited, per key. Default 60 s. */
  intervalMs?: number;
  /** Keys remembered by warnRateLimited and warnOnce; the oldest is forgotten past it. Default 1024. */
  maxKeys?: number;
  /** Clock in milliseconds, for tests. Default Date.now. */
  now?: () => number;
}

interface KeyState {
  lastLoggedMs: number;
  suppressed: number;
}

export function createLogger(out: NodeJS.WritableStream, opts: LoggerOptions = {}): Logger {
  const intervalMs = opts.intervalMs ?? 60_000;
  const maxKeys = opts.maxKeys ?? 1024;
  const now = opts.now ?? Date.now;
  // A key forgotten for room only lets its warning be written again sooner:
  // nothing is lost, so these evictions are not counted as drops.
  const rateLimited = new BoundedMap<string, KeyState>(maxKeys);
  const onceKeys = new BoundedSet<string>(maxKeys);

  function line(level: LogLevel, msg: string, fields?: LogFields): void {
    const record = { level, time: new Date(now()).toISOString(), msg, ...fields };
    let text: string;
    try {
      text = JSON.stringify(record, jsonSafe);
    } catch {
      // A cyclic field must not turn a warning into a crash.
      text = JSON.stringify({ level, time: record.time, msg, fields: "unserialisable" });
    }
    out.write(text + "\n");
  }

  return {
    info: (msg, fields) => line("info", msg, fields),
    warn: (msg, fields) => line("warn", msg, fields),
    error: (msg, fields) => line("error", msg, fields),
    warnRateLimited(key, msg, fields) {
      const t = now();
      const state = rateLimited.get(key);
      if (state !== undefined && t - state.lastLoggedMs < intervalMs) {
        state.suppressed++;
        return;
      }
      const suppressed = state?.suppressed ?? 0;
      rateLimited.set(key, { lastLoggedMs: t, suppressed: 0 });
      line("warn", msg, suppressed > 0 ? { ...fields, suppressed } : fields);
    },
    warnOnce(key, msg, fields) {
      if (onceKeys.has(key)) return;
      onceKeys.add(key);
      line("warn", msg, fields);
    },
  };
}

/** Errors and bigints are common in fields; JSON.stringify would drop or reject them. */
function jsonSafe(_key: string, value: unknown): unknown {
  if (typeof value === "bigint") return value.toString();
  if (value instanceof Error) return { name: value.name, message: value.message };
  return value;
}
