// Issue 7, live half: a real Prometheus (Debian's package) scrapes the real
// agent while the testbed apiserver kills status writes of real operators;
// then every panel query of dashboards/lostwrite.json answers through
// Prometheus's HTTP API, the silent-loss alert fires and reaches a real
// Alertmanager and its webhook, and promtool finds the agent's /metrics clean.
//
// The scenario feeds every panel: silent losses (swallow-mode operator:
// reset, unanswered close, 409, 429), noticed losses and connect failures
// (correct-mode operator retrying into a refused listener), and TCP
// retransmits (the packets to the apiserver port dropped for a moment by a
// traffic-control class on loopback, so the operator's kernel retransmits).
// Agent-health panels that are zero by design (probe restarts, parse errors,
// kernel-dropped events, pipeline drops, rejected spans, index evictions)
// count when they return a zero-valued series: the series exists, so the
// panel draws a flat line instead of "No data".
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import WebSocket from "ws";
import { waitFor } from "./support/agentProcess.ts";
import { alertmanagerTool, startAlertmanager, startWebhookReceiver, type RunningAlertmanager, type WebhookReceiver } from "./support/alertmanager.ts";
import { dashboardQueries } from "./support/dashboardQueries.ts";
import { assertKernelRequirements, missingKernelRequirements } from "./support/kernelRequirements.ts";
import { prometheusTool, startPrometheus, type RunningPrometheus } from "./support/prometheus.ts";
import { startTestbedStack, type OperatorProcess, type TestbedStack } from "./support/testbedStack.ts";
import { locateTool, type LocatedTool } from "./support/tools.ts";

const run = promisify(execFile);
const promtoolTool = locateTool("promtool", "apt-get install prometheus");
// tc lives in sbin, where locateTool does not look.
const tcTool: LocatedTool = ["/usr/sbin/tc", "/sbin/tc"].some((p) => existsSync(p))
  ? { path: ["/usr/sbin/tc", "/sbin/tc"].find((p) => existsSync(p))!, reason: "" }
  : { path: null, reason: "tc not found in /usr/sbin, /sbin (apt-get install iproute2)" };

const tools = [prometheusTool, alertmanagerTool, promtoolTool, tcTool];

/** The skip reason, or false under CI=true (then `before` fails on what is missing). */
function skipReason(): string | false {
  if (process.env.CI === "true") return false;
  const missing = [...missingKernelRequirements(), ...tools.filter((t) => t.path === null).map((t) => t.reason)];
  return missing.length > 0 ? missing.join("; ") : false;
}

// Panels whose series are zero by design in a healthy agent: data is a series, not a non-zero value.
const ZERO_BY_DESIGN = new Set([
  "Probe restarts by reason",
  "Kernel-dropped probe events/s",
  "Probe parse errors/s",
  "Pipeline drops/s by stage and reason",
  "Span intake/s [B]",
  "Span index [B]",
  "Queue length",
]);

const RETRANSMITS_PANEL = "TCP retransmits/s by pod";

/**
 * Drops, until undone, the packets sent to one loopback port: an HTB class
 * chosen by a u32 filter on the destination port, whose queue holds nothing
 * (pfifo limit 0). Other loopback traffic is unclassified and goes straight
 * through (HTB's direct queue, no shaping). Dropping, not delaying: TCP does
 * not retransmit a segment still sitting in a local queue. Returns the undo.
 */
async function dropLoopbackPort(tc: string, port: number): Promise<() => Promise<void>> {
  const { stdout } = await run(tc, ["qdisc", "show", "dev", "lo"]);
  if (!/^qdisc noqueue /m.test(stdout)) throw new Error(`lo already has a queueing discipline; not touching it:\n${stdout}`);
  await run(tc, ["qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "0"]);
  const undo = async (): Promise<void> => {
    await run(tc, ["qdisc", "del", "dev", "lo", "root", "handle", "1:"]).catch(() => undefined);
  };
  try {
    await run(tc, ["class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb", "rate", "8kbit", "ceil", "8kbit", "quantum", "1514"]);
    await run(tc, ["qdisc", "add", "dev", "lo", "parent", "1:10", "handle", "10:", "pfifo", "limit", "0"]);
    await run(tc, ["filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
      "match", "ip", "dport", String(port), "0xffff", "flowid", "1:10"]);
  } catch (error) {
    await undo();
    throw error;
  }
  return undo;
}

describe("on-call: dashboard, alert and metrics against real Prometheus and Alertmanager, fed by the real agent", { skip: skipReason(), timeout: 150_000 }, () => {
  let stack: TestbedStack;
  let swallow: OperatorProcess;
  let correct: OperatorProcess;
  let webhook: WebhookReceiver;
  let alertmanager: RunningAlertmanager;
  let prometheus: RunningPrometheus;
  let feedSocket: WebSocket;
  let releasePort: (() => Promise<void>) | null = null;
  let warmups = 0;

  before(async () => {
    assertKernelRequirements();
    for (const tool of tools) if (tool.path === null) throw new Error(tool.reason);
    webhook = await startWebhookReceiver();
    alertmanager = await startAlertmanager({ webhookUrl: webhook.url });
    stack = await startTestbedStack({
      operators: [
        { mode: "swallow", namespace: "swallow", workers: 2 },
        { mode: "correct", namespace: "correct", workers: 2 },
      ],
      correlationWindow: "2s",
    });
    [swallow, correct] = stack.operators as [OperatorProcess, OperatorProcess];
    prometheus = await startPrometheus({
      target: stack.agent.url.replace(/^http:\/\//, ""),
      targetLabels: { node: "e2e-node" },
      alertmanager: alertmanager.address,
    });
    // A live-feed client, as `lostwrite tail` would be.
    feedSocket = new WebSocket(`${stack.agent.url.replace(/^http/, "ws")}/events`);
    await new Promise<void>((resolve, reject) => {
      feedSocket.once("open", resolve);
      feedSocket.once("error", reject);
    });
  });

  after(async () => {
    await releasePort?.();
    feedSocket?.close();
    await prometheus?.stop();
    await stack?.close();
    await alertmanager?.stop();
    await webhook?.close();
  });

  async function warm(operator: OperatorProcess): Promise<void> {
    const namespace = operator.namespace!;
    const name = `warm-${++warmups}`;
    stack.createWidget(namespace, name);
    await waitFor(`the operator to have written ${namespace}/${name}`, () =>
      operator.log.some((line) => line.includes('"msg":"status written"') && line.includes(`"name":"${name}"`)), 15_000);
  }

  async function lose(operator: OperatorProcess, name: string, rule: Record<string, unknown>, cause: string): Promise<void> {
    const namespace = operator.namespace!;
    stack.apiserver.control.addRule({ id: `${namespace}-${name}`, method: "PATCH", path: `*/namespaces/${namespace}/widgets/${name}/status`, ...rule });
    stack.createWidget(namespace, name);
    await waitFor(`the ${cause} loss of ${namespace}/${name}`, () =>
      stack.agent.events.some((e) => e.reconcile?.name === name && e.cause === cause), 15_000);
  }

  it("the scenario produces silent and noticed losses, connect failures and dropped packets", async () => {
    // A baseline scrape first: a counter series is born at its first value,
    // which rate() cannot see, so every series needs a later increment too.
    await prometheus.waitFor('lostwrite_probe_up{node="e2e-node"}', (s) => s.length > 0, 10_000);
    // Silent losses: the swallow-mode operator reports success.
    await warm(swallow);
    await lose(swallow, "silent-reset", { action: "reset" }, "connection_reset");
    await warm(swallow);
    await lose(swallow, "silent-close", { action: "close" }, "connection_closed_unanswered");
    await lose(swallow, "silent-conflict", { action: "status", code: 409 }, "http_rejected");
    await lose(swallow, "silent-throttled", { action: "status", code: 429, retryAfterSeconds: 1 }, "http_rejected");

    // Noticed losses and refused connects: the correct-mode operator retries
    // into a listener that refuses for 2 s.
    await warm(correct);
    await lose(correct, "noticed-refused", { action: "refuse", for: "2s", existing: "reset" }, "connection_reset");
    await waitFor("refused reconnects", () => stack.agent.events.some((e) => e.cause === "connect_failed" && e.errno === "ECONNREFUSED"), 15_000);
    await waitFor("the retried status to land", () => stack.statusOf("correct", "noticed-refused")?.observedGeneration === 1, 15_000);

    // A second unanswered close, seconds after the first (see the baseline above).
    await warm(swallow);
    await lose(swallow, "silent-close-again", { action: "close" }, "connection_closed_unanswered");

    // Retransmits: a status write whose packets are dropped for a moment
    // (the kernel retransmits it; `ss -ti` shows it). Whether the agent
    // counted them is asserted in its own test below.
    await warm(swallow);
    const retransmitted = "retransmitted";
    releasePort = await dropLoopbackPort(tcTool.path!, stack.apiserver.port);
    try {
      stack.createWidget("swallow", retransmitted);
      await new Promise((r) => setTimeout(r, 2500)); // RTOs of 200, 400, 800 ms and the probe's 1 s tick
    } finally {
      await releasePort();
      releasePort = null;
    }
    await waitFor("the retransmitted write to land", () => stack.statusOf("swallow", retransmitted)?.observedGeneration === 1, 20_000);

    const causes = new Set(stack.agent.events.map((e) => `${e.cause}/${e.noticed}`));
    for (const expected of ["connection_reset/no", "connection_closed_unanswered/no", "http_rejected/no", "connection_reset/yes", "connect_failed/yes"]) {
      assert.ok(causes.has(expected), `${expected} among ${[...causes].join(", ")}`);
    }
  });

  it("every dashboard panel query returns data from Prometheus", async () => {
    // Enough scrapes after the scenario for rate() over the rate interval.
    await prometheus.waitFor('count_over_time(lostwrite_probe_up{node="e2e-node"}[1m])', (s) => (s[0]?.value ?? 0) >= 10, 30_000);
    const empty: string[] = [];
    const zero: string[] = [];
    for (const { panel, expr } of dashboardQueries({ rateInterval: "1m", range: "5m" })) {
      const samples = await prometheus.query(expr); // throws on a query error, naming the expression
      if (panel === RETRANSMITS_PANEL) continue; // its own test below
      if (samples.length === 0) empty.push(panel);
      else if (!ZERO_BY_DESIGN.has(panel) && !samples.some((s) => s.value > 0)) zero.push(`${panel}: ${JSON.stringify(samples)}`);
    }
    assert.deepEqual(empty, [], "panels whose query returned no series");
    assert.deepEqual(zero, [], "panels the scenario feeds that show only zeros");
  });

  it("the silent-loss alert fires and reaches Alertmanager's webhook with the labels on-call needs", async () => {
    const alert = await webhook.waitFor(
      (a) => a.status === "firing" && a.labels.alertname === "LostwriteSilentStatusWriteLoss" && a.labels.cause === "connection_reset",
      30_000,
    );
    // namespace and pod are empty outside Kubernetes, and Prometheus drops empty labels.
    assert.deepEqual(alert.labels, {
      alertname: "LostwriteSilentStatusWriteLoss",
      severity: "critical",
      node: "e2e-node",
      controller: "widget",
      request: "status",
      cause: "connection_reset",
    });
    assert.equal(alert.annotations.runbook_url, "docs/runbooks.md#lostwritesilentstatuswriteloss");
    assert.match(alert.annotations.description ?? "", /controller\s+"widget"[\s\S]*node\s+"e2e-node"/);
    // Noticed losses (correct mode) never page as silent ones.
    await new Promise((r) => setTimeout(r, 2000));
    const silentCauses = webhook.alerts
      .filter((a) => a.labels.alertname === "LostwriteSilentStatusWriteLoss")
      .map((a) => a.labels.cause);
    assert.ok(!silentCauses.includes("connect_failed"), `connect failures were noticed: ${silentCauses.join(", ")}`);
    assert.deepEqual(webhook.rejected, []);
  });

  it("TCP retransmits of the operator's apiserver connection reach /metrics and the retransmits panel", async () => {
    assert.ok((await stack.agent.metric("lostwrite_apiserver_retransmits_total")) > 0, "lostwrite_apiserver_retransmits_total after dropped packets");
    const query = dashboardQueries({ rateInterval: "1m", range: "5m" }).find((q) => q.panel === RETRANSMITS_PANEL);
    assert.ok(query, `the dashboard has the ${RETRANSMITS_PANEL} panel`);
    const samples = await prometheus.waitFor(query.expr, (found) => found.some((s) => s.value > 0), 10_000);
    assert.ok(samples.length > 0);
  });

  it("promtool check metrics finds the agent's /metrics clean", async () => {
    const text = await (await fetch(`${stack.agent.url}/metrics`)).text();
    const result = await new Promise<{ code: number | null; output: string }>((resolve, reject) => {
      const child = execFile(promtoolTool.path!, ["check", "metrics"], (error, stdout, stderr) => {
        resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, output: stdout + stderr });
      });
      child.once("error", reject);
      child.stdin!.end(text);
    });
    assert.equal(result.output.trim(), "", "promtool's complaints");
    assert.equal(result.code, 0);
    assert.ok(text.includes("lostwrite_status_write_lost_total{"), "the checked text carries the loss series");
  });
});
