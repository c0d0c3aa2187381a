// On-call, live: a real Prometheus (Debian's package) scrapes the real
// agent while the testbed apiserver kills status writes of real operators;
// then every panel query of dashboards/lostwrite.json answers through
// Prometheus's HTTP API, the silent-loss alert fires and reaches a real
// Alertmanager and its webhook, and promtool finds the agent's /metrics clean.
//
// The scenario feeds every panel: silent losses (swallow-mode operator:
// reset, unanswered close, 409, 429), noticed losses and connect failures
// (correct-mode operator retrying into a refused listener), and TCP
// retransmits (a client whose request's first transmission is withheld in
// TCP repair mode, so its kernel really retransmits on loopback).
// Agent-health panels that are zero by design (probe restarts, parse errors,
// kernel-dropped events, pipeline drops, rejected spans, index evictions)
// count when they return a zero-valued series: the series exists, so the
// panel draws a flat line instead of "No data".
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import WebSocket from "ws";
import { waitFor } from "./support/agentProcess.ts";
import { startAlertmanager, startWebhookReceiver, type RunningAlertmanager, type WebhookReceiver } from "./support/alertmanager.ts";
import { dashboardQueries } from "./support/dashboardQueries.ts";
import { assertKernelRequirements, missingKernelRequirements } from "./support/kernelRequirements.ts";
import { startPrometheus, type RunningPrometheus } from "./support/prometheus.ts";
import { HttpsClient } from "./support/httpsClient.ts";
import { startTestbedStack, type OperatorProcess, type TestbedStack } from "./support/testbedStack.ts";
import { MONITORING_GENERATIONS, type MonitoringGeneration } from "./support/tools.ts";

// Every generation users run watches the same agent side by side: one scenario, each stack asked the same questions.
const tools = MONITORING_GENERATIONS.flatMap((g) => [g.prometheus, g.alertmanager, g.promtool]);

/** One generation's Prometheus, Alertmanager and the webhook its alerts reach. */
interface Monitoring {
  generation: MonitoringGeneration;
  webhook: WebhookReceiver;
  alertmanager: RunningAlertmanager;
  prometheus: RunningPrometheus;
}

/** The skip reason, or false under CI=true (then `before` fails on what is missing). */
function skipReason(): string | false {
  if (process.env.CI === "true") return false;
  const missing = [...missingKernelRequirements(), ...tools.filter((t) => t.path === null).map((t) => t.reason)];
  return missing.length > 0 ? missing.join("; ") : false;
}

const UPROBES_PANEL = "Uprobe programs: Go requests and TLS answers attached, Go targets followed, restarts";

// Panels whose series are zero by design in a healthy agent: data is a series, not a non-zero value.
const ZERO_BY_DESIGN = new Set([
  "Probe restarts by reason, changes not acknowledged, Kubernetes watch failures [A]",
  // [B], the send hook attached, is 1 here: the scenario's rules keep it.
  // [C], connections adopted: no Go operator here (sendHook.test.ts shows it).
  "Probe restarts by reason, changes not acknowledged, Kubernetes watch failures [C]",
  "Probe restarts by reason, changes not acknowledged, Kubernetes watch failures [D]",
  // Not in Kubernetes mode here.
  "Probe restarts by reason, changes not acknowledged, Kubernetes watch failures [E]",
  // Failed page-outs of bpftrace's compiler: none where the agent may page out (the next panel shows what went).
  "Probe restarts by reason, changes not acknowledged, Kubernetes watch failures [F]",
  "Kernel-dropped probe events and skipped probe runs/s [A]",
  "Kernel-dropped probe events and skipped probe runs/s [B]",
  "Probe parse errors/s",
  "Pipeline drops/s by stage and reason",
  "Span intake/s [B]",
  // Every span sender here is a target process: no refused write is seen only in untrusted spans.
  "Span intake/s [C]",
  "Span index [B]",
  "Queue length",
  // This scenario's operators are Node processes: no Go binary to follow per
  // request (the Go request probes have their own e2e test, goRequests.test.ts),
  // but node's OpenSSL gets a TLS program ([D] must show it); no restarts,
  // and no merge of programs with one file probed ([F]).
  `${UPROBES_PANEL} [A]`,
  `${UPROBES_PANEL} [B]`,
  `${UPROBES_PANEL} [C]`,
  `${UPROBES_PANEL} [E]`,
  `${UPROBES_PANEL} [F]`,
]);

const RETRANSMITS_PANEL = "TCP retransmits/s by pod";

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe("on-call: dashboard, alert and metrics against real Prometheus and Alertmanager, fed by the real agent", { skip: skipReason(), timeout: 150_000 }, () => {
  let stack: TestbedStack;
  let swallow: OperatorProcess;
  let correct: OperatorProcess;
  const monitors: Monitoring[] = [];
  /** What `before` started, to stop in reverse order. */
  const stops: (() => Promise<void>)[] = [];
  let feedSocket: WebSocket;
  let warmups = 0;
  let dir: string;
  /** What the retransmitting client reported of its request: kept for the retransmits test's message. */
  let retransmittedRequest = "";

  before(async () => {
    assertKernelRequirements();
    for (const tool of tools) if (tool.path === null) throw new Error(tool.reason);
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-oncall-"));
    stack = await startTestbedStack({
      agentArgs: ["--target-comm", "^lwc-retrans$"],
      operators: [
        { mode: "swallow", namespace: "swallow", workers: 2 },
        // Like client-go, it waits out a 429's retry-after and sends the write again.
        { mode: "correct", namespace: "correct", workers: 2, throttleRetries: 2 },
      ],
      correlationWindow: "2s",
    });
    [swallow, correct] = stack.operators as [OperatorProcess, OperatorProcess];
    for (const generation of MONITORING_GENERATIONS) {
      const webhook = await startWebhookReceiver();
      stops.push(() => webhook.close());
      const alertmanager = await startAlertmanager({ webhookUrl: webhook.url, tool: generation.alertmanager });
      stops.push(() => alertmanager.stop());
      const prometheus = await startPrometheus({
        target: stack.agent.url.replace(/^http:\/\//, ""),
        targetLabels: { node: "e2e-node" },
        alertmanager: alertmanager.address,
        tool: generation.prometheus,
      });
      stops.push(() => prometheus.stop());
      monitors.push({ generation, webhook, alertmanager, prometheus });
    }
    // A live-feed client, as `lostwrite tail` would be.
    feedSocket = new WebSocket(`${stack.agent.url.replace(/^http/, "ws")}/events`);
    await new Promise<void>((resolve, reject) => {
      feedSocket.once("open", resolve);
      feedSocket.once("error", reject);
    });
  });

  after(async () => {
    feedSocket?.close();
    for (const stop of stops.reverse()) await stop();
    await stack?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
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

  it("the scenario produces silent and noticed losses, connect failures and retransmits", async () => {
    // A baseline scrape first: a counter series is born at its first value,
    // which rate() cannot see, so every series needs a later increment too.
    await everyPrometheus((p) => p.waitFor('lostwrite_probe_up{node="e2e-node"}', (s) => s.length > 0, 10_000));
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

    // Throttled, then answered on the retry: no loss, a retry — twice, seconds
    // apart, so the retry series has an increment rate() can see.
    for (const name of ["throttled-retried", "throttled-retried-again"]) {
      const retriedBefore = await stack.agent.metric("lostwrite_status_write_retried_total", { code: "429" });
      stack.apiserver.control.addRule({ id: `correct-${name}`, method: "PATCH", path: `*/namespaces/correct/widgets/${name}/status`, action: "status", code: 429, retryAfterSeconds: 1 });
      stack.createWidget("correct", name);
      await waitFor(`the throttled write ${name} to land on its retry`, () => stack.statusOf("correct", name)?.observedGeneration === 1, 15_000);
      await waitFor(`the retry of ${name} to be counted`, async () => (await stack.agent.metric("lostwrite_status_write_retried_total", { code: "429" })) > retriedBefore, 10_000);
      assert.ok(!stack.agent.events.some((e) => e.reconcile?.name === name), `a retried write is no loss: ${name}`);
      await sleep(2500);
    }

    // A second unanswered close, seconds after the first (see the baseline above).
    await warm(swallow);
    await lose(swallow, "silent-close-again", { action: "close" }, "connection_closed_unanswered");

    // Retransmits: a client (a target too) whose request's first
    // transmission is withheld in TCP repair mode, so the kernel really
    // retransmits it. (Dropping in a local qdisc would not do: TCP sees a
    // local drop as congestion and sends again later, which is no retransmit.)
    const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
    const retransmitter = path.join(dir, "lwc-retrans");
    symlinkSync(python, retransmitter);
    const client = new HttpsClient(retransmitter, stack.apiserver.port, 5);
    try {
      await client.watchedBy(stack.agent);
      // Its series is born at 0 when it becomes a target; rate() sees the
      // retransmit only if Prometheus scraped that 0 first, and the client's
      // whole life can fit between two scrapes.
      await everyPrometheus((p) => p.waitFor('lostwrite_apiserver_retransmits_total{process="lwc-retrans"}', (s) => s.length > 0, 10_000));
      await client.run("connect");
      const warmUp = await client.run("request GET /version 0");
      assert.equal(warmUp.status, 200);
      const retransmitted = await client.run("request_retransmitted GET /version 0");
      assert.equal(retransmitted.status, 200, `retransmitted request: ${JSON.stringify(retransmitted)}`);
      retransmittedRequest = JSON.stringify(retransmitted);
    } finally {
      await client.exit();
    }

    const causes = new Set(stack.agent.events.map((e) => `${e.cause}/${e.noticed}`));
    for (const expected of ["connection_reset/no", "connection_closed_unanswered/no", "http_rejected/no", "connection_reset/yes", "connect_failed/yes"]) {
      assert.ok(causes.has(expected), `${expected} among ${[...causes].join(", ")}`);
    }
  });

  it("every dashboard panel query returns data from Prometheus", async () => {
    for (const { generation, prometheus } of monitors) {
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
      assert.deepEqual(empty, [], `panels whose query returned no series (${generation.name})`);
      assert.deepEqual(zero, [], `panels the scenario feeds that show only zeros (${generation.name})`);
    }
  });

  it("the silent-loss alert fires and reaches Alertmanager's webhook with the labels on-call needs", async () => {
    for (const m of monitors) await silentLossAlertReached(m);
  });

  async function silentLossAlertReached({ generation, webhook }: Monitoring): Promise<void> {
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
    // Absolute, so a notification's link works outside the repository; the base is configurable (docs/install.md).
    const runbook = new URL(alert.annotations.runbook_url ?? "");
    assert.equal(runbook.hash, "#lostwritesilentstatuswriteloss");
    // The default base is the agent's own page (reached through a port-forward in a cluster): it opens, at the alert's section.
    const page = await fetch(`${stack.agent.url}${runbook.pathname}`);
    assert.equal(page.status, 200, `${runbook.pathname} on the agent`);
    assert.match(await page.text(), /<h2 id="lostwritesilentstatuswriteloss">LostwriteSilentStatusWriteLoss<\/h2>/);
    assert.match(alert.annotations.description ?? "", /controller\s+"widget"[\s\S]*node\s+"e2e-node"/);
    // Noticed losses (correct mode) never page as silent ones.
    await new Promise((r) => setTimeout(r, 2000));
    const silentCauses = webhook.alerts
      .filter((a) => a.labels.alertname === "LostwriteSilentStatusWriteLoss")
      .map((a) => a.labels.cause);
    assert.ok(!silentCauses.includes("connect_failed"), `connect failures were noticed: ${silentCauses.join(", ")} (${generation.name})`);
    assert.deepEqual(webhook.rejected, [], generation.name);
  }

  it("TCP retransmits on an apiserver connection reach /metrics and the retransmits panel", async () => {
    if ((await stack.agent.metric("lostwrite_apiserver_retransmits_total")) === 0) {
      // Say what there was to go on: the request (its elapsed_ms shows whether a retransmission timer fired) and the agent's log of the client.
      const series = (await (await fetch(`${stack.agent.url}/metrics`)).text()).split("\n").filter((l) => l.startsWith("lostwrite_apiserver_retransmits_total"));
      const log = stack.agent.stderr.filter((l) => l.includes("lwc-retrans"));
      assert.fail(`lostwrite_apiserver_retransmits_total is 0 after dropped packets; request ${retransmittedRequest}; series ${series.join(" | ")}; agent log ${log.join(" | ")}`);
    }
    const query = dashboardQueries({ rateInterval: "1m", range: "5m" }).find((q) => q.panel === RETRANSMITS_PANEL);
    assert.ok(query, `the dashboard has the ${RETRANSMITS_PANEL} panel`);
    for (const { generation, prometheus } of monitors) {
      const samples = await prometheus.waitFor(query.expr, (found) => found.some((s) => s.value > 0), 10_000);
      assert.ok(samples.length > 0, generation.name);
    }
  });

  it("promtool check metrics finds the agent's /metrics clean", async () => {
    const text = await (await fetch(`${stack.agent.url}/metrics`)).text();
    assert.ok(text.includes("lostwrite_status_write_lost_total{"), "the checked text carries the loss series");
    for (const { promtool, name } of MONITORING_GENERATIONS) {
      const result = await new Promise<{ code: number | null; output: string }>((resolve, reject) => {
        const child = execFile(promtool.path!, ["check", "metrics"], (error, stdout, stderr) => {
          resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, output: stdout + stderr });
        });
        child.once("error", reject);
        child.stdin!.end(text);
      });
      assert.equal(result.output.trim(), "", `promtool's complaints (${name})`);
      assert.equal(result.code, 0, name);
    }
  });

  /** Runs `check` on every generation's Prometheus at once. */
  async function everyPrometheus(check: (prometheus: RunningPrometheus) => Promise<unknown>): Promise<void> {
    await Promise.all(monitors.map((m) => check(m.prometheus)));
  }
});
