// The alert rules are a product on-call depends on: they must load, their
// promtool unit tests must pass, every alert must be tested both ways, wait
// (`for:`) or say why it must not, carry what on-call needs, point with an
// absolute URL at a runbook section that exists, find the agent's scrape job
// under the names the shipped ServiceMonitor and the test Prometheus give it,
// and the PrometheusRule generated from them must be up to date.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { execa } from "execa";
import { parse } from "yaml";
import { z } from "zod";
import { alertsPath, prometheusRulePath, renderPrometheusRule } from "../../../scripts/gen-prometheusrule.ts";
import { locateTool, skipUnlessCI } from "../e2e/support/tools.ts";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const alertsTestPath = join(ROOT, "dashboards/alerts.test.yaml");
const runbooksPath = join(ROOT, "docs/runbooks.md");

/** Every runbook_url is `${RUNBOOK_BASE}#<anchor>`. */
const RUNBOOK_BASE = "https://github.com/lostwrite/lostwrite/blob/main/docs/runbooks.md";
/** The group whose alerts find the agent's targets by job. */
const SCRAPE_GROUP = "lostwrite.scrape";
const DEFAULT_JOB = "lostwrite|lostwrite-metrics";
/** Alerts about all nodes at once (absent()): their description cannot name one. */
const CLUSTER_WIDE = new Set(["LostwriteAgentNotScraped"]);
/** Alerts without `for:`: each says why, in its rule's comment and in its runbook section. */
const IMMEDIATE = new Set(["LostwriteSilentStatusWriteLoss"]);

const alertRule = z.object({
  alert: z.string(),
  expr: z.string(),
  for: z.string().optional(),
  labels: z.record(z.string(), z.string()),
  annotations: z.record(z.string(), z.string()),
});
const ruleGroups = z.array(z.object({ name: z.string(), rules: z.array(alertRule) }));
const alertsText = readFileSync(alertsPath, "utf8");
const groups = z.object({ groups: ruleGroups }).parse(parse(alertsText)).groups;
const alerts = groups.flatMap((g) => g.rules.map((r) => ({ ...r, group: g.name })));

const promtool = locateTool("promtool", "apt-get install prometheus");
const needsPromtool = { skip: skipUnlessCI(promtool) };
const promtoolPath = (): string => promtool.path ?? assert.fail(promtool.reason);

async function runPromtool(args: string[]): Promise<void> {
  const result = await execa(promtoolPath(), args, { reject: false, all: true });
  assert.equal(result.exitCode, 0, `promtool ${args.join(" ")} failed:\n${result.all}`);
}

void test("promtool check rules accepts dashboards/alerts.yaml", needsPromtool, async () => {
  await runPromtool(["check", "rules", alertsPath]);
});

void test("promtool test rules passes dashboards/alerts.test.yaml", needsPromtool, async () => {
  await runPromtool(["test", "rules", alertsTestPath]);
});

void test("the alerts the on-call contract names all exist", () => {
  const names = alerts.map((a) => a.alert).sort();
  assert.deepEqual(names, [
    "LostwriteAgentNotScraped",
    "LostwriteAgentScrapeFailing",
    "LostwriteApiserverConnectFailures",
    "LostwriteApiserverWriteFailureRatioHigh",
    "LostwriteKernelDroppingEvents",
    "LostwritePipelineDroppingEvents",
    "LostwriteProbeDown",
    "LostwriteProbeRestarting",
    "LostwriteSilentStatusWriteLoss",
  ]);
  assert.equal(alerts.find((a) => a.alert === "LostwriteSilentStatusWriteLoss")?.labels.severity, "critical");
});

void test("every alert has a promtool test where it fires and one where it stays silent", () => {
  const testFile = z
    .object({
      tests: z.array(
        z.object({
          alert_rule_test: z.array(z.object({ alertname: z.string(), exp_alerts: z.array(z.unknown()).nullish() })),
        }),
      ),
    })
    .parse(parse(readFileSync(alertsTestPath, "utf8")));
  const cases = testFile.tests.flatMap((t) => t.alert_rule_test);
  for (const { alert } of alerts) {
    const mine = cases.filter((c) => c.alertname === alert);
    assert.ok(mine.some((c) => (c.exp_alerts ?? []).length > 0), `${alert}: no test where it fires`);
    assert.ok(mine.some((c) => (c.exp_alerts ?? []).length === 0), `${alert}: no test where it stays silent`);
  }
});

/** GitHub's heading anchor: lower case, punctuation dropped, spaces to dashes. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

const runbooks = readFileSync(runbooksPath, "utf8");
/** Runbook sections by anchor: the text from a `## ` heading to the next. */
const runbookSections = new Map(
  runbooks
    .split(/^(?=## )/m)
    .filter((part) => part.startsWith("## "))
    .map((part) => [anchorOf(/^## (.+)$/m.exec(part)?.[1] ?? ""), part] as const),
);

/** The rule's own lines in dashboards/alerts.yaml, comments included. */
function ruleText(alert: string): string {
  const start = alertsText.indexOf(`- alert: ${alert}\n`);
  assert.ok(start >= 0, `${alert} in dashboards/alerts.yaml`);
  const next = alertsText.slice(start + 1).search(/^\s*- (alert|name):/m);
  return next < 0 ? alertsText.slice(start) : alertsText.slice(start, start + 1 + next);
}

void test("every alert waits (`for:`), or says in its rule and its runbook why it fires immediately", () => {
  for (const { alert, for: wait } of alerts) {
    const section = runbookSections.get(alert.toLowerCase()) ?? "";
    if (IMMEDIATE.has(alert)) {
      assert.equal(wait, undefined, `${alert} is listed as immediate but has for: ${wait}`);
      assert.match(ruleText(alert), /# No `for:`, on purpose: \S/, `${alert}: the rule's comment says why it has no for:`);
      assert.match(section, /\*\*Fires immediately \(no `for:`\), on purpose\.\*\* \S/, `${alert}: the runbook says why it has no for:`);
      continue;
    }
    const minutes = /^(\d+)m$/.exec(wait ?? "")?.[1];
    assert.ok(minutes !== undefined, `${alert}: for: in whole minutes, or listed as immediate with a reason (got ${wait})`);
    assert.match(section, new RegExp(`\\*\\*Waits ${minutes} minutes?\\*\\*`), `${alert}: the runbook says how long it waits (${wait}) and why`);
  }
});

void test("every alert has severity, summary, description and an absolute runbook URL whose anchor is a section", () => {
  for (const { alert, expr, labels, annotations } of alerts) {
    assert.match(labels.severity ?? "", /^(critical|warning|info)$/, `${alert}: severity`);
    assert.ok((annotations.summary ?? "").length > 0, `${alert}: no summary`);
    if (CLUSTER_WIDE.has(alert)) {
      assert.match(expr, /^absent\(/, `${alert} is listed as cluster-wide: an absent() alert has no node`);
    } else {
      // on-call must be told where: every description names the node.
      assert.match(annotations.description ?? "", /\$labels\.node/, `${alert}: description does not name the node`);
    }
    const url = annotations.runbook_url ?? "";
    assert.equal(new URL(url).protocol, "https:", `${alert}: runbook_url is an absolute https URL`);
    const anchor = alert.toLowerCase();
    assert.equal(url, `${RUNBOOK_BASE}#${anchor}`, `${alert}: runbook_url`);
    assert.ok(runbookSections.has(anchor), `${alert}: docs/runbooks.md has no section "## ${alert}"`);
  }
  assert.ok(RUNBOOK_BASE.endsWith("/docs/runbooks.md"), "the default base is this repository's docs/runbooks.md");
  for (const anchor of runbookSections.keys()) {
    assert.ok(
      alerts.some((a) => a.alert.toLowerCase() === anchor),
      `docs/runbooks.md has a section #${anchor} for an alert that does not exist`,
    );
  }
});

/** The job the Prometheus Operator gives a ServiceMonitor's targets: the Service's `jobLabel` label, else its name. */
function serviceMonitorJob(): string {
  const monitor = z
    .object({ spec: z.object({ jobLabel: z.string().optional() }) })
    .parse(parse(readFileSync(join(ROOT, "deploy/base/servicemonitor.yaml"), "utf8")));
  const service = z
    .object({ metadata: z.object({ name: z.string(), labels: z.record(z.string(), z.string()).optional() }) })
    .parse(parse(readFileSync(join(ROOT, "deploy/base/service.yaml"), "utf8")));
  const fromLabel = monitor.spec.jobLabel === undefined ? undefined : service.metadata.labels?.[monitor.spec.jobLabel];
  return fromLabel ?? service.metadata.name;
}

void test("the scrape alerts match the agent's job as the ServiceMonitor and the test Prometheus name it, and nothing else depends on the job", () => {
  const scrape = alerts.filter((a) => a.group === SCRAPE_GROUP);
  assert.deepEqual(scrape.map((a) => a.alert).sort(), ["LostwriteAgentNotScraped", "LostwriteAgentScrapeFailing"]);
  for (const { alert, expr } of scrape) {
    assert.ok(expr.includes(`job=~"${DEFAULT_JOB}"`), `${alert}: matches job=~"${DEFAULT_JOB}"`);
    assert.match(expr, /\bup\{job=~"/, `${alert}: matches up by job`);
  }
  const e2ePrometheus = readFileSync(join(ROOT, "agent/test/e2e/support/prometheus.ts"), "utf8");
  const e2eJob = /job_name: "([^"]+)"/.exec(e2ePrometheus)?.[1];
  const jobs = { ServiceMonitor: serviceMonitorJob(), "e2e Prometheus": e2eJob ?? "(no job_name found)" };
  const matcher = new RegExp(`^(?:${DEFAULT_JOB})$`); // Prometheus anchors label regexes
  for (const [where, job] of Object.entries(jobs)) assert.match(job, matcher, `the ${where} job "${job}" is matched by job=~"${DEFAULT_JOB}"`);
  for (const { alert, expr, group } of alerts) {
    if (group !== SCRAPE_GROUP) assert.doesNotMatch(expr, /\bjob\s*=/, `${alert}: only ${SCRAPE_GROUP} may depend on the job name`);
  }
});

void test("deploy/base/prometheusrule.yaml is generated from the current alerts.yaml", () => {
  const wanted = renderPrometheusRule(alertsText);
  assert.equal(
    readFileSync(prometheusRulePath, "utf8"),
    wanted,
    "deploy/base/prometheusrule.yaml is stale: run node scripts/gen-prometheusrule.ts",
  );
});

const prometheusRule = z.object({
  kind: z.literal("PrometheusRule"),
  metadata: z.object({ name: z.literal("lostwrite"), namespace: z.literal("lostwrite") }),
  spec: z.object({ groups: ruleGroups }),
});

void test("the generated PrometheusRule's groups are a rule file promtool accepts", needsPromtool, async () => {
  const manifest = prometheusRule.parse(parse(readFileSync(prometheusRulePath, "utf8")));
  const dir = mkdtempSync(join(tmpdir(), "lostwrite-rules-"));
  try {
    const file = join(dir, "rules.json");
    // A rule file may be JSON: YAML is a superset of it.
    writeFileSync(file, JSON.stringify({ groups: manifest.spec.groups }));
    await runPromtool(["check", "rules", file]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
