// `lostwrite demo`: the whole system on one machine. The testbed apiserver,
// the sample operators (two Node ones: one swallows failed status writes,
// one handles them; with Go installed, a Go one in client-go's shape that
// swallows them), a status writer that writes into dead connections, the
// agent with real probes on all of them, and a fault script covering every loss cause. Detections appear as they
// happen; at the end each injected fault is paired with its detection, and
// the exit code says whether they agree. Teardown always runs, also on
// Ctrl-C and on errors.
import { existsSync, mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import type { FaultRecord } from "../../../testbed/apiserver/faults.ts";
import { loadScenario, type Rule } from "../../../testbed/apiserver/scenario.ts";
import type { LossEvent } from "../model.ts";
import { shouldColor } from "../tail.ts";
import { identifiedRules, runFaultScript, targetedOperators, targetsWriter, sleep } from "./faultScript.ts";
import { commandLine, planInstall, readMachineState, runInstall } from "./install.ts";
import { missingForDemo } from "./requirements.ts";
import { Screen } from "./screen.ts";
import { DEMO_OPERATORS, operatorLabel, startStack, type DemoStack } from "./stack.ts";
import { expectedDetections, matchDetections, type DemoOperator, type MatchResult } from "./summary.ts";
import { bracketHost as hostForUrl, splitHostPort } from "../hostPort.ts";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const DEFAULT_SCENARIO = path.join(repoRoot, "testbed/scenarios/demo.yaml");
const SHIPPED_RECORDING = "recordings/demo.jsonl";
const CORRELATION_WINDOW_MS = 3000;

const durationMs = z
  .string()
  .regex(/^\d+(\.\d+)?(ms|s|m)$/, "expected a duration like 30s, 1m or 500ms")
  .transform((text) => {
    const value = Number.parseFloat(text);
    return text.endsWith("ms") ? value : text.endsWith("s") ? value * 1000 : value * 60_000;
  });

const optionsSchema = z.object({
  duration: durationMs.optional(),
  keepRunning: z.boolean().optional(),
  scenario: z.string().min(1).optional(),
  record: z.string().min(1).optional(),
  listen: z.string().refine((value) => splitHostPort(value) !== null, "expected ADDR:PORT").default("127.0.0.1:9470"),
  /** false with --no-install: print what is missing, install nothing. */
  install: z.boolean().default(true),
});
type DemoOptions = z.output<typeof optionsSchema>;

const FLAG_OF: Record<string, string> = {
  duration: "--duration",
  keepRunning: "--keep-running",
  scenario: "--scenario",
  record: "--record",
  listen: "--listen",
  install: "--no-install",
};

/** Validates the command's options; the error names the flag and the value. */
export function parseDemoOptions(opts: Record<string, unknown>): DemoOptions {
  const result = optionsSchema.safeParse(opts);
  if (result.success) return result.data;
  throw new Error(
    result.error.issues
      .map((issue) => {
        const key = String(issue.path[0] ?? "");
        return `${FLAG_OF[key] ?? key} ${JSON.stringify(opts[key])}: ${issue.message}`;
      })
      .join("; "),
  );
}

export async function runDemo(rawOpts: Record<string, unknown>, out: NodeJS.WritableStream = process.stdout): Promise<number> {
  const print = (text = ""): void => void out.write(text + "\n");
  let opts: DemoOptions;
  let rules: (Rule & { id: string })[];
  try {
    opts = parseDemoOptions(rawOpts);
    const scenarioFile = opts.scenario ?? DEFAULT_SCENARIO;
    const scenario = await loadScenario(scenarioFile);
    rules = identifiedRules(scenario);
    if (rules.length === 0) throw new Error(`${scenarioFile}: the scenario has no rules`);
  } catch (err) {
    process.stderr.write(`lostwrite demo: ${(err as Error).message}\n`);
    return 2;
  }

  if (!(await prepareMachine(opts.install, print))) return 1;
  const missing = await missingForDemo();
  if (missing.length > 0) {
    print("lostwrite demo needs the real kernel probes, and this machine is missing:");
    for (const m of missing) print(`  - ${m.what}\n      fix: ${m.fix}`);
    print();
    const recording = path.join(repoRoot, SHIPPED_RECORDING);
    if (existsSync(recording)) {
      print("The same story from a recorded demo session needs neither root nor bpftrace:");
      print(`  node_modules/.bin/node agent/src/cli.ts replay ${SHIPPED_RECORDING}`);
    }
    return 1;
  }

  const screen = new Screen(out, { color: shouldColor(out), live: (out as { isTTY?: boolean }).isTTY === true });
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-demo-"));
  const stop = new AbortController();
  const onSigint = (): void => {
    if (stop.signal.aborted) return;
    screen.line(screen.style("yellow", "interrupted: stopping"));
    stop.abort();
  };
  process.on("SIGINT", onSigint);
  process.on("SIGTERM", onSigint);

  let stack: DemoStack | undefined;
  try {
    screen.line(screen.style("bold", "lostwrite demo") + ": testbed apiserver, sample operators, a status writer, the agent with real probes");
    screen.line(`  logs (agent, operators): ${path.join(dir, "demo.log")}`);
    const started = Date.now();
    stack = await startStack({
      dir,
      listen: opts.listen,
      correlationWindowMs: CORRELATION_WINDOW_MS,
      ...(opts.record !== undefined ? { record: path.resolve(opts.record) } : {}),
      onStep: (what) => screen.line(`  starting ${what}`),
      signal: stop.signal,
    });
    if (stop.signal.aborted) return 130;
    const metricsUrl = `http://${hostForUrl(stack.agent.listen.host)}:${stack.agent.listen.port}`;
    const building = stack.goBuildMs > 0 ? ` (${(stack.goBuildMs / 1000).toFixed(1)} s of it building the Go operator)` : "";
    screen.line(`  ready in ${((Date.now() - started) / 1000).toFixed(1)} s${building}, probe variant ${stack.agent.variant}`);
    for (const op of stack.operators) {
      const how = op.mode === "correct" ? "returns the error and retries" : op.runtime === "go" ? "drops a failed status write and reports success" : "logs a failed status write and reports success";
      const runtime = op.runtime === "go" ? "Go, watch and writes on one HTTP/2 connection as client-go; " : "";
      screen.line(`  ${operatorLabel(op).padEnd(20)} pid ${op.pid}, namespace ${op.namespace}: ${runtime}${how}`);
    }
    // Steps for an operator this machine cannot run (the Go one, without a Go toolchain) are left out.
    const running = stack.operators;
    const absent = DEMO_OPERATORS.filter((spec) => !running.some((op) => op.namespace === spec.namespace));
    for (const rule of rules.filter((r) => targetedOperators(r, absent).length > 0)) {
      screen.line(screen.style("dim", `  ${rule.id}: left out (${absent.map(operatorLabel).join(", ")} not running: no Go toolchain)`));
    }
    rules = rules.filter((r) => targetedOperators(r, absent).length === 0);
    screen.line(`  ${"status writer".padEnd(20)} pid ${stack.writer.pid}, namespace ${stack.writer.namespace}: python3, writes into a dead connection as client-go does; sends no spans`);
    screen.line(`  agent: ${metricsUrl}/metrics   events: ws://${hostForUrl(stack.agent.listen.host)}:${stack.agent.listen.port}/events`);
    screen.line();

    const events: LossEvent[] = [];
    let skipped = 0;
    const records: FaultRecord[] = [];
    stack.agent.onLoss((event) => {
      events.push(event);
      screen.detection(event);
    });
    stack.apiserver.control.onFault((record) => {
      records.push(record);
      screen.injected(record);
    });

    screen.startScript(rules.length);
    const live = stack;
    await runFaultScript(stack, rules, {
      durationMs: opts.duration ?? Number.POSITIVE_INFINITY,
      signal: stop.signal,
      onStep: ({ index, rule, state }) => {
        if (state === "started") {
          const targets = targetedOperators(rule, live.operators).map(operatorLabel);
          if (targetsWriter(rule, live.writer)) targets.push("status writer");
          screen.stepStarted(index, rule.id, rule.action, targets.length > 0 ? `→ ${targets.join(", ")}` : `→ ${rule.method ?? "*"} ${rule.path}`);
        } else if (state === "skipped") {
          screen.line(`        ${rule.id}: skipped (starts at ${rule.at} ms, past --duration)`);
          skipped += 1;
          screen.stepDone();
        } else {
          if (state === "not-fired") screen.line(screen.style("yellow", `        ${rule.id}: no request matched within the step`));
          screen.stepDone();
        }
      },
    });
    // --duration longer than the script: the system stays up for the rest of it.
    if (opts.duration !== undefined) await sleep(started + opts.duration - Date.now(), stop.signal);

    const operators: DemoOperator[] = [
      ...stack.operators.map(({ mode, namespace, pid, runtime }) => ({ mode, namespace, pid, runtime })),
      { mode: "writer", namespace: stack.writer.namespace, pid: stack.writer.pid },
    ];
    const byId = new Map<string, Rule>(rules.map((rule) => [rule.id, rule]));
    const expected = (): ReturnType<typeof expectedDetections> => expectedDetections(records, byId, operators);
    // Wait for detections: every expected one, and a full correlation window after the last fault for any extra.
    const lastFaultMs = records.length > 0 ? Date.parse(records[records.length - 1]!.time) : Date.now();
    const quietUntil = lastFaultMs + CORRELATION_WINDOW_MS + 1500;
    const giveUpAt = Date.now() + CORRELATION_WINDOW_MS + 10_000;
    while (!stop.signal.aborted && Date.now() < giveUpAt) {
      if (Date.now() >= quietUntil && matchDetections(expected(), events, operators).missed.length === 0) break;
      await sleep(200, stop.signal);
    }
    if (stop.signal.aborted) return 130;

    screen.finish();
    const result = matchDetections(expected(), events, operators);
    printSummary(screen, result, records, rules, operators);
    // A target that died during the script makes every later step about it meaningless, however the summary reads.
    const died = [
      ...stack.operators.map((op) => ({ label: operatorLabel(op), child: op.child })),
      { label: "status writer", child: stack.writer.child },
    ].filter(({ child }) => child.exitCode !== null || child.signalCode !== null);
    for (const { label, child } of died) {
      screen.line(screen.style("red", `✘ the ${label} [${child.pid}] exited during the demo (${child.signalCode ?? `code ${child.exitCode}`}): see ${stack.logPath}`));
    }
    if (skipped > 0) screen.line(`${skipped} step(s) of the script skipped: they start past --duration`);

    if (opts.record !== undefined && !existsSync(opts.record)) {
      screen.line(screen.style("yellow", `note: --record ${opts.record} was not written by this agent build`));
    }
    if (opts.keepRunning === true) {
      screen.line();
      screen.line(`still running (Ctrl-C stops): ${metricsUrl}/metrics   ${metricsUrl}/healthz   ws://${hostForUrl(stack.agent.listen.host)}:${stack.agent.listen.port}/events`);
      screen.line(`  e.g. curl -s ${metricsUrl}/metrics | grep lostwrite_status_write_lost_total`);
      screen.line(`       node_modules/.bin/node agent/src/cli.ts tail ws://${hostForUrl(stack.agent.listen.host)}:${stack.agent.listen.port}/events --since 2000-01-01T00:00:00Z`);
      await new Promise<void>((resolve) => stop.signal.addEventListener("abort", () => resolve(), { once: true }));
    }
    return result.agree && died.length === 0 ? 0 : 1;
  } catch (err) {
    screen.finish();
    if (stop.signal.aborted) return 130;
    process.stderr.write(`lostwrite demo: ${(err as Error).message}\n  logs: ${path.join(dir, "demo.log")}\n`);
    return 1;
  } finally {
    process.off("SIGINT", onSigint);
    process.off("SIGTERM", onSigint);
    if (stack !== undefined) {
      await stack.close();
      screen.line(screen.style("dim", "stopped: operators, agent and testbed apiserver"));
    }
  }
}

function printSummary(
  screen: Screen,
  result: MatchResult,
  records: readonly FaultRecord[],
  rules: readonly (Rule & { id: string })[],
  operators: readonly DemoOperator[],
): void {
  screen.line();
  screen.line(screen.style("bold", "detections by cause"));
  for (const row of screen.causeTable()) screen.line(`  ${row}`);
  screen.line();
  screen.line(screen.style("bold", "expected vs detected"));
  const ok = screen.style("green", "✔");
  const bad = screen.style("red", "✘");
  const rows = [
    ...result.matched.map((m) => ({ seq: m.expected.faultSeq, time: m.expected.timeMs, text: matchedLine(m, ok, bad, screen, operators) })),
    ...result.missed.map((e) => ({
      seq: e.faultSeq,
      time: e.timeMs,
      text: `${bad} ${e.rule.padEnd(18)} ${e.cause.padEnd(28)} ${e.operator ?? "-"}: ${screen.style("red", "MISSED")} (expected noticed=${e.noticed}; ${e.why})`,
    })),
  ].sort((a, b) => a.time - b.time || a.seq - b.seq);
  for (const row of rows) screen.line(`  ${row.text}`);
  for (const event of result.invented) {
    screen.line(`  ${bad} ${"(no fault)".padEnd(18)} ${event.cause.padEnd(28)} ${screen.style("red", "INVENTED")} pid ${event.pid ?? "-"} at ${event.time}`);
  }
  const harmless = records.filter((r) => r.expect?.cause === undefined && !rules.some((rule) => rule.id === r.rule && rule.action === "refuse"));
  for (const record of harmless) screen.line(`  ${ok} ${record.rule.padEnd(18)} ${"(no loss expected)".padEnd(28)} ${record.detail}: none detected`);

  const expectedCount = result.matched.length + result.missed.length;
  const wrongNoticed = result.matched.filter((m) => !m.noticedAgrees).length;
  screen.line();
  if (result.agree) {
    screen.line(screen.style(["bold", "green"], `result: ${records.length} faults injected, every expected loss detected exactly once (${result.matched.length} of ${expectedCount}), none missed, none invented`));
  } else {
    screen.line(
      screen.style(
        ["bold", "red"],
        `result: DISAGREE: ${records.length} faults injected, ${result.matched.length} of ${expectedCount} expected losses detected, ${result.missed.length} missed, ${result.invented.length} invented, ${wrongNoticed} with the wrong noticed`,
      ),
    );
  }
}

function matchedLine(m: MatchResult["matched"][number], ok: string, bad: string, screen: Screen, operators: readonly DemoOperator[]): string {
  const e = m.event;
  const noticed = e.noticed === "no" ? screen.style(["bold", "red"], "SILENT ") : `noticed=${e.noticed}`;
  const verdict = m.noticedAgrees ? ok : bad;
  const wrong = m.noticedAgrees ? "" : screen.style("red", ` (expected noticed=${m.expected.noticed})`);
  const request = e.request?.method != null ? `${e.request.method} ${e.request.path?.replace(/^.*\/namespaces\//, "…/") ?? ""}` : "request unknown";
  const after = ((Date.parse(e.time) - m.expected.timeMs) / 1000).toFixed(2);
  const operator = operators.find((op) => op.namespace === m.expected.operator);
  const who = `${operator === undefined ? "?" : operator.mode === "writer" ? "status writer" : operatorLabel({ mode: operator.mode, runtime: operator.runtime ?? "node" })}${e.pid !== null ? ` [${e.pid}]` : ""}`;
  return `${verdict} ${m.expected.rule.padEnd(18)} ${m.expected.cause.padEnd(28)} ${noticed}${wrong}  ${who.padEnd(24)} ${request}  (${after} s after)`;
}



/**
 * A fresh Debian or Ubuntu machine, as root: installs what the demo needs,
 * saying each command. Otherwise (not root, --no-install, another
 * distribution) prints the commands to run; the checks that follow say what
 * is still missing. False when an install step failed.
 */
async function prepareMachine(install: boolean, print: (text?: string) => void): Promise<boolean> {
  const state = await readMachineState();
  const steps = planInstall(state);
  if (steps.length === 0) return true;
  if (state.root && state.apt && install) {
    print("lostwrite demo: this machine lacks what the demo needs; installing it (--no-install to refuse):");
    const result = await runInstall(steps, print);
    if (!result.ok) {
      print(`lostwrite demo: ${result.reason}`);
      return false;
    }
    print();
    return true;
  }
  const why = !state.apt
    ? "this is not Debian or Ubuntu: install bpftrace and python3 from your distribution, and mount tracefs:"
    : !state.root
      ? "not root: nothing installed. Run, as root:"
      : "--no-install: nothing installed. Run:";
  print(`lostwrite demo: ${why}`);
  for (const step of state.apt ? steps : steps.filter((s) => s.argv[0] === "mount")) print(`  ${commandLine(step, !state.root)}`);
  print();
  return true;
}
