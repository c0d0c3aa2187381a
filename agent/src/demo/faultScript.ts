// Runs a fault scenario against the demo's operators, step by step. A rule's
// `at` is when its step starts. Each step first lets the targeted operator
// write status successfully on its current connection (so the fault hits a
// connection that has answered before, like client-go's long-lived one),
// then arms the rule and changes a widget's spec so the operator writes
// status into the fault, and waits until the rule has fired. A rule on the
// status writer's namespace drives the status writer instead: a PATCH that
// succeeds, then the faulted one (a reset makes it write again into the dead
// connection), and, when the rule expects a zero-byte write, a zero-byte send
// on its live connection after the answer.
import type { FaultRecord } from "../../../testbed/apiserver/faults.ts";
import type { Rule, Scenario } from "../../../testbed/apiserver/scenario.ts";
import { WIDGETS, WIDGETS_PER_OPERATOR, widgetName, type DemoStack, type RunningOperator } from "./stack.ts";
import type { StatusWriter } from "./statusWriter.ts";

interface StepReport {
  index: number;
  rule: Rule & { id: string };
  state: "started" | "fired" | "not-fired" | "skipped";
  records: FaultRecord[];
}

interface ScriptOptions {
  /** Steps whose `at` lies past this are skipped (ms); Infinity runs them all. */
  durationMs: number;
  signal: AbortSignal;
  onStep: (report: StepReport) => void;
}

const STEP_TIMEOUT_MS = 6000;

/** Gives every rule an id, so records, steps and summary lines name it. */
export function identifiedRules(scenario: Scenario): (Rule & { id: string })[] {
  return scenario.rules.map((rule, i) => ({ ...rule, id: rule.id ?? `rule-${i + 1}` }));
}

function globMatches(glob: string, text: string): boolean {
  const body = glob.split("").map((ch) => (ch === "*" ? ".*" : ch === "?" ? "." : ch.replace(/[.+^${}()|[\]\\]/g, "\\$&"))).join("");
  return new RegExp(`^${body}$`).test(text);
}

/** The operators whose status writes (merge PATCH to …/status) the rule matches. */
export function targetedOperators<T extends Pick<RunningOperator, "namespace">>(rule: Rule, operators: readonly T[]): T[] {
  if (rule.method !== undefined && rule.method !== "*" && rule.method.toUpperCase() !== "PATCH") return [];
  return operators.filter((op) => globMatches(rule.path, `/apis/${WIDGETS.replace(/\/widgets$/, "")}/namespaces/${op.namespace}/widgets/${widgetName(0)}/status`));
}

/** Whether the rule matches the status writer's status PATCH. */
export function targetsWriter(rule: Rule, writer: Pick<StatusWriter, "namespace">): boolean {
  if (rule.method !== undefined && rule.method !== "*" && rule.method.toUpperCase() !== "PATCH") return false;
  return globMatches(rule.path, `/apis/${WIDGETS.replace(/\/widgets$/, "")}/namespaces/${writer.namespace}/widgets/${widgetName(0)}/status`);
}

/** Waits `ms`, or less when `signal` aborts: the demo stops promptly on Ctrl-C. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted || ms <= 0) return resolve();
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

async function until(condition: () => boolean, timeoutMs: number, signal: AbortSignal): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!signal.aborted && Date.now() < deadline) {
    if (condition()) return true;
    await sleep(50, signal);
  }
  return condition();
}

function statusCurrent(stack: DemoStack, namespace: string, name: string): boolean {
  const widget = stack.apiserver.store.get(WIDGETS, namespace, name) as
    | { metadata: { generation?: number }; status?: { observedGeneration?: number } }
    | undefined;
  return widget !== undefined && widget.status?.observedGeneration === widget.metadata.generation;
}

export async function runFaultScript(stack: DemoStack, rules: readonly (Rule & { id: string })[], opts: ScriptOptions): Promise<void> {
  const steps = [...rules].map((rule, i) => ({ rule, i })).sort((a, b) => a.rule.at - b.rule.at || a.i - b.i);
  const start = Date.now();
  for (const [index, { rule }] of steps.entries()) {
    if (opts.signal.aborted) return;
    if (rule.at > opts.durationMs) {
      opts.onStep({ index, rule, state: "skipped", records: [] });
      continue;
    }
    await sleep(start + rule.at - Date.now(), opts.signal);
    if (opts.signal.aborted) return;
    opts.onStep({ index, rule, state: "started", records: [] });
    if (targetsWriter(rule, stack.writer)) {
      const records = await runWriterStep(stack, rule, opts.signal);
      if (opts.signal.aborted) return;
      opts.onStep({ index, rule, state: records.length > 0 ? "fired" : "not-fired", records });
      continue;
    }
    const targets = targetedOperators(rule, stack.operators);
    const name = widgetName(index % WIDGETS_PER_OPERATOR);

    // A successful status write first, on the connection the fault will hit.
    for (const op of targets) {
      stack.bumpWidget(op.namespace, name);
      await until(() => statusCurrent(stack, op.namespace, name), STEP_TIMEOUT_MS, opts.signal);
    }

    const records: FaultRecord[] = [];
    const stopListening = stack.apiserver.control.onFault((record) => {
      if (record.rule === rule.id) records.push(record);
    });
    try {
      stack.apiserver.control.addRule({ ...rule, at: 0 });
      const due = rule.count === "always" ? 1 : rule.count;
      for (const op of targets) stack.bumpWidget(op.namespace, name);
      // The correct operator retries by itself; a swallowed write needs a new change to write again.
      const deadline = Date.now() + STEP_TIMEOUT_MS * due;
      while (!opts.signal.aborted && records.length < due && Date.now() < deadline) {
        const before = records.length;
        await until(() => records.length > before, 1500, opts.signal);
        if (records.length === before) for (const op of targets.filter((t) => t.mode === "swallow")) stack.bumpWidget(op.namespace, name);
      }
      if (targets.length > 0) {
        // Let the operators settle (retries, reconnects) before the next step's warm-up.
        await until(() => targets.every((op) => statusCurrent(stack, op.namespace, name) || op.mode === "swallow"), STEP_TIMEOUT_MS, opts.signal);
      }
    } finally {
      stopListening();
      // A step owns its rule: an "always" rule must not leak into the next step.
      stack.apiserver.control.removeRule(rule.id);
    }
    if (opts.signal.aborted) return;
    opts.onStep({ index, rule, state: records.length > 0 ? "fired" : "not-fired", records });
  }
}

async function runWriterStep(stack: DemoStack, rule: Rule & { id: string }, signal: AbortSignal): Promise<FaultRecord[]> {
  // A successful status write first, on the connection the fault will hit.
  await stack.writer.run("patch");
  const records: FaultRecord[] = [];
  const stopListening = stack.apiserver.control.onFault((record) => {
    if (record.rule === rule.id) records.push(record);
  });
  try {
    stack.apiserver.control.addRule({ ...rule, at: 0 });
    await stack.writer.run("patch");
    await until(() => records.length > 0, 1500, signal);
    if (rule.expect?.cause === "zero_byte_write") await stack.writer.run("zero");
  } finally {
    stopListening();
    stack.apiserver.control.removeRule(rule.id);
  }
  return records;
}
