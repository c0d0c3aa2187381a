// Expected vs detected: turns the testbed's fault records into the loss
// events the agent should emit, pairs them with the events it did emit, and
// says whether they agree. Pure: the demo and its tests feed it records and
// events.
//
// An event belongs to an operator by pid, else by the namespace of its
// reconcile or request (each demo operator owns one namespace); a fault by
// the namespace in the faulted request's path. A pair must agree on cause,
// operator and `noticed`, and the event must fall within a time window
// around the injection.
import type { FaultRecord } from "../../../testbed/apiserver/faults.ts";
import type { Rule } from "../../../testbed/apiserver/scenario.ts";
import type { LossCause, LossEvent, Noticed } from "../model.ts";
import { parseRfc3339Ns } from "../sinks/rfc3339.ts";

export interface DemoOperator {
  /** "writer": the status writer, which sends no spans, so its losses are noticed "unknown". */
  mode: "correct" | "swallow" | "writer";
  namespace: string;
  pid: number;
  /** The Go sample operator (client-go's shape) rather than the Node one. */
  runtime?: "node" | "go";
}

export interface ExpectedDetection {
  faultSeq: number;
  rule: string;
  cause: LossCause;
  noticed: Noticed;
  /** The operator's namespace; null when the faulted request names none. */
  operator: string | null;
  /** Wall-clock ms of the injection. */
  timeMs: number;
  why: string;
}

export interface MatchedDetection {
  expected: ExpectedDetection;
  event: LossEvent;
  /** The event's `noticed` is what was expected. */
  noticedAgrees: boolean;
}

export interface MatchResult {
  matched: MatchedDetection[];
  missed: ExpectedDetection[];
  /** Events no injected fault explains. */
  invented: LossEvent[];
  /** Every fault detected exactly once, with the expected `noticed`, and nothing else. */
  agree: boolean;
}

interface MatchOptions {
  /** An event may precede its injection record by this much (the record is written after the act). */
  beforeMs?: number;
  /** ... and follow it by this much (retries, correlation). */
  afterMs?: number;
}

const NAMESPACE_IN_PATH = /\/namespaces\/([^/]+)\//;

function namespaceOfPath(path: string | null | undefined): string | null {
  if (path === null || path === undefined) return null;
  return NAMESPACE_IN_PATH.exec(path)?.[1] ?? null;
}

function defaultNoticed(operator: DemoOperator | undefined): Noticed {
  if (operator === undefined || operator.mode === "writer") return "unknown";
  return operator.mode === "swallow" ? "no" : "yes";
}

/**
 * The detections each fault record calls for: the record's `expect.cause`,
 * and for an outage that reset (or closed) the open connections, the loss of
 * the request that triggered it, which died with its connection. Likewise a
 * reset or close whose record expects something else (the status writer's
 * write into the dead connection): the faulted request died with it first.
 */
export function expectedDetections(
  records: readonly FaultRecord[],
  rules: ReadonlyMap<string, Rule>,
  operators: readonly DemoOperator[],
): ExpectedDetection[] {
  const out: ExpectedDetection[] = [];
  for (const record of records) {
    const namespace = namespaceOfPath(record.path);
    const operator = operators.find((op) => op.namespace === namespace);
    const base = { faultSeq: record.seq, rule: record.rule, operator: namespace, timeMs: Date.parse(record.time) };
    const rule = rules.get(record.rule);
    if (rule?.action === "refuse" && rule.existing !== "keep" && operator !== undefined) {
      out.push({
        ...base,
        cause: rule.existing === "reset" ? "connection_reset" : "connection_closed_unanswered",
        noticed: defaultNoticed(operator),
        why: `the ${record.method ?? ""} in flight died with its connection`.replace("  ", " "),
      });
    }
    const cause = record.expect?.cause;
    const death = rule?.action === "reset" ? "connection_reset" : rule?.action === "close" ? "connection_closed_unanswered" : undefined;
    if (death !== undefined && cause !== undefined && cause !== death) {
      out.push({ ...base, cause: death, noticed: defaultNoticed(operator), why: `the ${record.method ?? ""} died with its connection`.replace("  ", " ") });
    }
    if (cause !== undefined) {
      out.push({ ...base, cause, noticed: record.expect?.noticed ?? defaultNoticed(operator), why: record.expect?.note ?? record.detail });
    }
  }
  return out;
}

/** The operator (its namespace) an event belongs to. */
function operatorOfEvent(event: LossEvent, operators: readonly DemoOperator[]): string | null {
  const byPid = operators.find((op) => event.pid !== null && op.pid === event.pid);
  if (byPid !== undefined) return byPid.namespace;
  const namespace = event.reconcile?.namespace ?? namespaceOfPath(event.request?.path);
  return namespace !== null && operators.some((op) => op.namespace === namespace) ? namespace : null;
}

function eventTimeMs(event: LossEvent): number {
  const ns = parseRfc3339Ns(event.time);
  return ns === null ? Number.NaN : Number(ns / 1_000_000n);
}

/**
 * Pairs each expectation, oldest first, with the closest unused event of the
 * same cause and operator inside the window. What is left on either side is
 * missed or invented.
 */
export function matchDetections(
  expected: readonly ExpectedDetection[],
  events: readonly LossEvent[],
  operators: readonly DemoOperator[],
  opts: MatchOptions = {},
): MatchResult {
  const beforeMs = opts.beforeMs ?? 1000;
  const afterMs = opts.afterMs ?? 5000;
  const unused = new Set(events.map((_, i) => i));
  const matched: MatchedDetection[] = [];
  const missed: ExpectedDetection[] = [];
  for (const want of [...expected].sort((a, b) => a.timeMs - b.timeMs || a.faultSeq - b.faultSeq)) {
    let best: number | null = null;
    let bestDistance = Number.POSITIVE_INFINITY;
    for (const i of unused) {
      const event = events[i]!;
      if (event.cause !== want.cause || operatorOfEvent(event, operators) !== want.operator) continue;
      const delta = eventTimeMs(event) - want.timeMs;
      if (!(delta >= -beforeMs && delta <= afterMs)) continue;
      if (Math.abs(delta) < bestDistance) {
        best = i;
        bestDistance = Math.abs(delta);
      }
    }
    if (best === null) {
      missed.push(want);
    } else {
      unused.delete(best);
      const event = events[best]!;
      matched.push({ expected: want, event, noticedAgrees: event.noticed === want.noticed });
    }
  }
  const invented = [...unused].sort((a, b) => a - b).map((i) => events[i]!);
  const agree = missed.length === 0 && invented.length === 0 && matched.every((m) => m.noticedAgrees);
  return { matched, missed, invented, agree };
}
