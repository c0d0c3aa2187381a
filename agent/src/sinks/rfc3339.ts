// RFC 3339 times to epoch nanoseconds, without losing the microseconds and
// nanoseconds that Date.parse drops. Loss events carry kernel-precision times,
// and both the exported span and the feed's `?since=` replay compare them.

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$/;

/** Epoch nanoseconds of an RFC 3339 time, or null when `text` is not one. */
export function parseRfc3339Ns(text: string): bigint | null {
  const m = RFC3339.exec(text);
  if (m === null) return null;
  const [, year, month, day, hour, minute, second, fraction = "", zone = "Z"] = m;
  const ms = Date.parse(`${year}-${month}-${day}T${hour}:${minute}:${second}${zone.toUpperCase()}`);
  if (Number.isNaN(ms)) return null;
  // Date.parse accepts 2026-02-31 by rolling over; a real time must round-trip.
  const check = new Date(ms + offsetMs(zone));
  if (check.getUTCDate() !== Number(day) || check.getUTCMonth() + 1 !== Number(month)) return null;
  return BigInt(ms) * 1_000_000n + BigInt(fraction.padEnd(9, "0") || "0");
}

function offsetMs(zone: string): number {
  if (zone === "Z" || zone === "z") return 0;
  const sign = zone.startsWith("-") ? -1 : 1;
  const [h = "0", m = "0"] = zone.slice(1).split(":");
  return sign * (Number(h) * 60 + Number(m)) * 60_000;
}

/** [seconds, nanoseconds] as OpenTelemetry's HrTime wants it. */
export function nsToHrTime(ns: bigint): [number, number] {
  return [Number(ns / 1_000_000_000n), Number(ns % 1_000_000_000n)];
}
