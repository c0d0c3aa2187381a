// The alert rules are a product on-call depends on: they must load, their
// promtool unit tests must pass, every alert must be tested both ways, carry
// what on-call needs, point at a runbook section that exists, and the
// PrometheusRule generated from them must be up to date.
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

const alertsTestPath = fileURLToPath(new URL("../../../dashboards/alerts.test.yaml", import.meta.url));
const runbooksPath = fileURLToPath(new URL("../../../docs/runbooks.md", import.meta.url));

const alertRule = z.object({
  alert: z.string(),
  expr: z.string(),
  labels: z.record(z.string(), z.string()),
  annotations: z.record(z.string(), z.string()),
});
const alertRules = z
  .object({ groups: z.array(z.object({ rules: z.array(alertRule) })) })
  .transform((file) => file.groups.flatMap((g) => g.rules));
const alerts = alertRules.parse(parse(readFileSync(alertsPath, "utf8")));

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
    "LostwriteApiserverConnectFailures",
    "LostwriteKernelDroppingEvents",
    "LostwritePipelineDroppingEvents",
    "LostwriteProbeDown",
    "LostwriteProbeRestarting",
    "LostwriteSilentStatusWriteLoss",
    "LostwriteStatusWriteLossRatioHigh",
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

const runbookAnchors = new Set(
  [...readFileSync(runbooksPath, "utf8").matchAll(/^## (.+)$/gm)].map((m) => anchorOf(m[1] ?? "")),
);

void test("every alert has severity, summary, description and a runbook section that exists", () => {
  for (const { alert, labels, annotations } of alerts) {
    assert.match(labels.severity ?? "", /^(critical|warning|info)$/, `${alert}: severity`);
    assert.ok((annotations.summary ?? "").length > 0, `${alert}: no summary`);
    // on-call must be told where: every description names the node.
    assert.match(annotations.description ?? "", /\$labels\.node/, `${alert}: description does not name the node`);
    const anchor = alert.toLowerCase();
    assert.equal(annotations.runbook_url, `docs/runbooks.md#${anchor}`, `${alert}: runbook_url`);
    assert.ok(runbookAnchors.has(anchor), `${alert}: docs/runbooks.md has no section "## ${alert}"`);
  }
  for (const anchor of runbookAnchors) {
    assert.ok(
      alerts.some((a) => a.alert.toLowerCase() === anchor),
      `docs/runbooks.md has a section #${anchor} for an alert that does not exist`,
    );
  }
});

void test("deploy/base/prometheusrule.yaml is generated from the current alerts.yaml", () => {
  const wanted = renderPrometheusRule(readFileSync(alertsPath, "utf8"));
  assert.equal(
    readFileSync(prometheusRulePath, "utf8"),
    wanted,
    "deploy/base/prometheusrule.yaml is stale: run node scripts/gen-prometheusrule.ts",
  );
});

void test("the generated PrometheusRule's groups are a rule file promtool accepts", needsPromtool, async () => {
  const manifest = z
    .object({ kind: z.literal("PrometheusRule"), metadata: z.object({ namespace: z.literal("lostwrite") }), spec: z.object({ groups: z.array(z.unknown()) }) })
    .parse(parse(readFileSync(prometheusRulePath, "utf8")));
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
