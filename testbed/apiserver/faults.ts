// Fault rules and the fault log. The request handler asks `match()` which
// rule, if any, applies to a request; whatever is then done is recorded with
// `record()`: wall-clock time, CLOCK_MONOTONIC time (the clock bpftrace's
// `nsecs` reads, so kernel detections can be lined up with injections), the
// connection's client address, and the rule's expectation.
import { createWriteStream, type WriteStream } from "node:fs";
import type { ConnectionInfo, ExistingConnections, Listener } from "./connections.ts";
import { parseRule, type Expectation, type FaultActionType, type Rule, type Scenario } from "./scenario.ts";

export interface FaultRecord {
  seq: number;
  time: string;
  /** process.hrtime.bigint() at injection, decimal: CLOCK_MONOTONIC nanoseconds. */
  monotonicNs: string;
  rule: string;
  action: FaultActionType;
  /** Human-readable: "RST after 0 body bytes", "answered 409", "refused for 2000 ms, 1 connection reset". */
  detail: string;
  method: string | null;
  path: string | null;
  protocol: "h2" | "http/1.1" | null;
  streamId: number | null;
  connection: Pick<ConnectionInfo, "id" | "client" | "server"> | null;
  bytesRead: number | null;
  expect: Expectation | null;
}

interface RuleState {
  rule: Rule & { id: string };
  armed: boolean;
  /** Requests that matched method and path so far. */
  seen: number;
  /** Faults injected so far. */
  fired: number;
  exhausted: boolean;
}

interface RequestFacts {
  method: string;
  path: string;
}

type FaultListener = (record: FaultRecord) => void;

function globToRegExp(glob: string): RegExp {
  const body = glob.split("").map((ch) => (ch === "*" ? ".*" : ch === "?" ? "." : ch.replace(/[.+^${}()|[\]\\]/g, "\\$&"))).join("");
  return new RegExp(`^${body}$`);
}

interface ArmedRule extends RuleState {
  pattern: RegExp;
  timer: NodeJS.Timeout | undefined;
}

interface FaultControlOptions {
  /** Append every record as a JSON line to this file. */
  logPath?: string;
  /** Records kept in memory; older ones are dropped and counted. */
  logCapacity?: number;
  /** Rules held at once. */
  ruleCapacity?: number;
}

/** Rules, the fault log, and the faults that act on the whole server (refuse, reset all). */
export class FaultControl {
  private readonly rulesById = new Map<string, ArmedRule>();
  private readonly log: FaultRecord[] = [];
  private readonly listeners = new Set<FaultListener>();
  private readonly logCapacity: number;
  private readonly ruleCapacity: number;
  private readonly logFile: WriteStream | undefined;
  private nextSeq = 1;
  private nextRuleId = 1;
  private listener: Listener | undefined;
  /** Records that fell out of the in-memory log. */
  dropped = 0;

  constructor(opts: FaultControlOptions = {}) {
    this.logCapacity = opts.logCapacity ?? 10_000;
    this.ruleCapacity = opts.ruleCapacity ?? 1_000;
    if (opts.logPath) {
      this.logFile = createWriteStream(opts.logPath, { flags: "a" });
      this.logFile.on("error", (error) => console.error(`testbed apiserver: fault log ${opts.logPath}: ${error.message}`));
    }
  }

  /** Wires the listener that refuse and connection-wide faults act on. */
  attach(listener: Listener): void {
    this.listener = listener;
  }

  /** Validates and arms a rule (after its `at` delay); returns its id. */
  addRule(input: unknown): string {
    const rule = parseRule(input);
    if (this.rulesById.size >= this.ruleCapacity) throw new Error(`too many fault rules (capacity ${this.ruleCapacity}); delete some first`);
    const id = rule.id ?? `rule-${this.nextRuleId++}`;
    if (this.rulesById.has(id)) throw new Error(`fault rule id ${JSON.stringify(id)} already exists`);
    const armed: ArmedRule = {
      rule: { ...rule, id }, armed: rule.at === 0, seen: 0, fired: 0, exhausted: false,
      pattern: globToRegExp(rule.path), timer: undefined,
    };
    if (!armed.armed) {
      armed.timer = setTimeout(() => { armed.armed = true; }, rule.at);
      armed.timer.unref();
    }
    this.rulesById.set(id, armed);
    return id;
  }

  loadScenario(scenario: Scenario): string[] {
    return scenario.rules.map((rule) => this.addRule(rule));
  }

  removeRule(id: string): boolean {
    const armed = this.rulesById.get(id);
    clearTimeout(armed?.timer);
    return this.rulesById.delete(id);
  }

  clearRules(): void {
    for (const id of [...this.rulesById.keys()]) this.removeRule(id);
  }

  rules(): RuleState[] {
    return [...this.rulesById.values()].map(({ rule, armed, seen, fired, exhausted }) => ({ rule, armed, seen, fired, exhausted }));
  }

  /**
   * Counts this request against every armed rule that matches it and returns
   * the first rule that fires. A request faulted by one rule is still counted
   * (seen) by later matching rules, but only one fault is injected per request.
   */
  match(request: RequestFacts): (Rule & { id: string }) | undefined {
    let chosen: ArmedRule | undefined;
    for (const state of this.rulesById.values()) {
      if (!state.armed || state.exhausted) continue;
      const method = state.rule.method;
      if (method !== undefined && method !== "*" && method.toUpperCase() !== request.method.toUpperCase()) continue;
      if (!state.pattern.test(request.path)) continue;
      state.seen += 1;
      if (chosen || state.seen <= state.rule.skip) continue;
      chosen = state;
      state.fired += 1;
      if (state.rule.count !== "always" && state.fired >= state.rule.count) state.exhausted = true;
    }
    return chosen?.rule;
  }

  record(entry: Omit<FaultRecord, "seq" | "time" | "monotonicNs">): FaultRecord {
    const record: FaultRecord = { seq: this.nextSeq++, time: new Date().toISOString(), monotonicNs: process.hrtime.bigint().toString(), ...entry };
    this.log.push(record);
    if (this.log.length > this.logCapacity) {
      this.log.shift();
      this.dropped += 1;
    }
    this.logFile?.write(JSON.stringify(record) + "\n");
    for (const listener of this.listeners) {
      try {
        listener(record);
      } catch (error) {
        console.error("testbed apiserver: fault listener threw:", error);
      }
    }
    return record;
  }

  /** Records with seq > `since`. */
  faults(since = 0): FaultRecord[] {
    return this.log.filter((record) => record.seq > since);
  }

  onFault(listener: FaultListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Closes the listener for `forMs` so connects are refused. `trigger` names
   * the rule and request that caused it; without one it is a control API action.
   */
  refuseNow(forMs: number, existing: ExistingConnections, trigger?: Partial<Omit<FaultRecord, "seq" | "time" | "monotonicNs" | "action" | "detail">>): FaultRecord {
    const closed = this.requireListener().refuse(forMs, existing);
    return this.record({
      rule: "control", method: null, path: null, protocol: null, streamId: null, connection: null, bytesRead: null, expect: null,
      ...trigger, action: "refuse", detail: refuseDetail(forMs, existing, closed),
    });
  }

  /** Resets (RST) or closes (FIN, unanswered) every open connection now; one record per connection. */
  dropConnections(how: "reset" | "close", ruleId = "control"): FaultRecord[] {
    return this.requireListener().connections().map((conn) => {
      const info = conn.info();
      if (how === "reset") conn.reset();
      else conn.closeUnanswered();
      return this.record({
        rule: ruleId, action: how, detail: how === "reset" ? "RST on request of the control API" : "FIN without answer on request of the control API",
        method: null, path: null, protocol: info.protocol, streamId: null,
        connection: { id: info.id, client: info.client, server: info.server }, bytesRead: null, expect: null,
      });
    });
  }

  async close(): Promise<void> {
    this.clearRules();
    const file = this.logFile;
    if (file) await new Promise<void>((resolve) => file.end(() => resolve()));
  }

  private requireListener(): Listener {
    if (!this.listener) throw new Error("fault control is not attached to a listener");
    return this.listener;
  }
}

function refuseDetail(forMs: number, existing: ExistingConnections, closed: number): string {
  const what = existing === "keep" ? "open connections kept" : `${closed} open connection(s) ${existing === "reset" ? "reset" : "closed"}`;
  return `listener closed for ${forMs} ms, ${what}`;
}
