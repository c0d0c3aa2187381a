// The alert rules are a product on-call depends on: they must load, their
// promtool unit tests must pass, every alert must be tested both ways, wait
// (`for:`) or say why it must not, carry what on-call needs, point with an
// absolute URL at a runbook section that exists, find the agent's scrape job
// under the names the shipped ServiceMonitor and the test Prometheus give it,
// and the PrometheusRule generated from them must be up to date. The recipes
// in docs/install.md that set the runbook base and the scrape job are run
// here and must change exactly those values.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { parse, parseAllDocuments } from "yaml";
import { z } from "zod";
import { alertsPath, prometheusRulePath, renderPrometheusRule } from "../../../../scripts/gen-prometheusrule.ts";
import { CURRENT_MONITORING, locateTool, MONITORING_GENERATIONS, skipUnlessCI, type LocatedTool } from "../../e2e/support/tools.ts";
import { repoPath } from "../../repoPath.ts";

const ROOT = repoPath() + "/";
const alertsTestPath = join(ROOT, "dashboards/alerts.test.yaml");
const runbooksPath = join(ROOT, "docs/runbooks.md");
const installPath = join(ROOT, "docs/install.md");

/** Every runbook_url is `${RUNBOOK_BASE}#<anchor>` until an installation changes the base (docs/install.md): the agent's own /runbooks page. */
const RUNBOOK_BASE = "http://localhost:9470/runbooks";
/** The group whose alerts find the agent's targets by job; the job regex is the only quoted string in their expressions. */
const SCRAPE_GROUP = "lostwrite.scrape";
const DEFAULT_JOB = "lostwrite|lostwrite-metrics";
/** Alerts about all nodes at once (absent()): their description cannot name one. */
const CLUSTER_WIDE = new Set(["LostwriteAgentNotScraped"]);
/** Alerts without `for:`: each says why, in its rule's comment and in its runbook section. */
const IMMEDIATE = new Set(["LostwriteSilentStatusWriteLoss"]);
const INSTALL_SECTION = "## Alerts: runbook URLs and the scrape job";

const alertRule = z.object({
  alert: z.string(),
  expr: z.string(),
  for: z.string().optional(),
  labels: z.record(z.string(), z.string()),
  annotations: z.record(z.string(), z.string()),
});
const ruleGroups = z.array(z.object({ name: z.string(), rules: z.array(alertRule) }));
type RuleGroups = z.infer<typeof ruleGroups>;
const alertsText = readFileSync(alertsPath, "utf8");
const groups = z.object({ groups: ruleGroups }).parse(parse(alertsText)).groups;
const alerts = groups.flatMap((g) => g.rules.map((r) => ({ ...r, group: g.name })));

const kubectl = locateTool("kubectl", "https://kubernetes.io/docs/tasks/tools/");

async function runPromtool(promtool: LocatedTool, args: string[]): Promise<void> {
  const result = await execa(promtool.path ?? assert.fail(promtool.reason), args, { reject: false, all: true });
  assert.equal(result.exitCode, 0, `promtool ${args.join(" ")} failed:\n${result.all}`);
}

// The rules and their unit tests hold on every Prometheus generation users run.
for (const { name, promtool } of MONITORING_GENERATIONS) {
  void test(`promtool check rules accepts dashboards/alerts.yaml (${name})`, { skip: skipUnlessCI(promtool) }, async () => {
    await runPromtool(promtool, ["check", "rules", alertsPath]);
  });

  void test(`promtool test rules passes dashboards/alerts.test.yaml (${name})`, { skip: skipUnlessCI(promtool) }, async () => {
    await runPromtool(promtool, ["test", "rules", alertsTestPath]);
  });
}

void test("the alerts the on-call contract names all exist", () => {
  const names = alerts.map((a) => a.alert).sort();
  assert.deepEqual(names, [
    "LostwriteAgentNotScraped",
    "LostwriteAgentScrapeFailing",
    "LostwriteApiserverConnectFailures",
    "LostwriteApiserverWriteFailureRatioHigh",
    "LostwriteKernelDroppingEvents",
    "LostwriteKubernetesAccessDenied",
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
    assert.match(new URL(url).protocol, /^https?:$/, `${alert}: runbook_url is an absolute http(s) URL`);
    const anchor = alert.toLowerCase();
    assert.equal(url, `${RUNBOOK_BASE}#${anchor}`, `${alert}: runbook_url`);
    assert.ok(runbookSections.has(anchor), `${alert}: docs/runbooks.md has no section "## ${alert}"`);
  }
  assert.ok(RUNBOOK_BASE.endsWith(":9470/runbooks"), "the default base is the page every agent serves on its metrics port");
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
    .parse(parse(readFileSync(join(ROOT, "deploy/components/prometheus-operator/servicemonitor.yaml"), "utf8")));
  const service = z
    .object({ metadata: z.object({ name: z.string(), labels: z.record(z.string(), z.string()).optional() }) })
    .parse(parse(readFileSync(join(ROOT, "deploy/base/service.yaml"), "utf8")));
  const fromLabel = monitor.spec.jobLabel === undefined ? undefined : service.metadata.labels?.[monitor.spec.jobLabel];
  return fromLabel ?? service.metadata.name;
}

void test("the scrape alerts match the agent's job as the ServiceMonitor, the shipped scrape config and the test Prometheus name it, and nothing else depends on the job", () => {
  const scrape = alerts.filter((a) => a.group === SCRAPE_GROUP);
  assert.deepEqual(scrape.map((a) => a.alert).sort(), ["LostwriteAgentNotScraped", "LostwriteAgentScrapeFailing"]);
  for (const { alert, expr } of scrape) {
    // docs/install.md replaces the one quoted string of these expressions.
    assert.deepEqual([...expr.matchAll(/"([^"]*)"/g)].map((m) => m[1]), [DEFAULT_JOB], `${alert}: the job regex is its only quoted string`);
    assert.match(expr, /\bup\{job=~"/, `${alert}: matches up by job`);
  }
  const e2ePrometheus = readFileSync(join(ROOT, "agent/test/e2e/support/prometheus.ts"), "utf8");
  const e2eJob = /job_name: "([^"]+)"/.exec(e2ePrometheus)?.[1];
  const scrapeConfig = z
    .object({ scrape_configs: z.array(z.object({ job_name: z.string() })).length(1) })
    .parse(parse(readFileSync(join(ROOT, "deploy/prometheus/scrape-config.yaml"), "utf8")));
  const jobs = {
    ServiceMonitor: serviceMonitorJob(),
    "deploy/prometheus/scrape-config.yaml": scrapeConfig.scrape_configs[0]?.job_name ?? "",
    "e2e Prometheus": e2eJob ?? "(no job_name found)",
  };
  const matcher = new RegExp(`^(?:${DEFAULT_JOB})$`); // Prometheus anchors label regexes
  for (const [where, job] of Object.entries(jobs)) assert.match(job, matcher, `the ${where} job "${job}" is matched by job=~"${DEFAULT_JOB}"`);
  for (const { alert, expr, group } of alerts) {
    if (group !== SCRAPE_GROUP) assert.doesNotMatch(expr, /\bjob\s*=/, `${alert}: only ${SCRAPE_GROUP} may depend on the job name`);
  }
});

void test("deploy/components/prometheus-operator/prometheusrule.yaml is generated from the current alerts.yaml", () => {
  const wanted = renderPrometheusRule(alertsText);
  assert.equal(
    readFileSync(prometheusRulePath, "utf8"),
    wanted,
    "deploy/components/prometheus-operator/prometheusrule.yaml is stale: run node scripts/gen-prometheusrule.ts",
  );
});

const prometheusRule = z.object({
  kind: z.literal("PrometheusRule"),
  metadata: z.object({ name: z.literal("lostwrite"), namespace: z.literal("lostwrite") }),
  spec: z.object({ groups: ruleGroups }),
});

for (const { name, promtool } of MONITORING_GENERATIONS) {
  void test(`the generated PrometheusRule's groups are a rule file promtool accepts (${name})`, { skip: skipUnlessCI(promtool) }, async () => {
    const manifest = prometheusRule.parse(parse(readFileSync(prometheusRulePath, "utf8")));
    const dir = mkdtempSync(join(tmpdir(), "lostwrite-rules-"));
    try {
      const file = join(dir, "rules.json");
      // A rule file may be JSON: YAML is a superset of it.
      writeFileSync(file, JSON.stringify({ groups: manifest.spec.groups }));
      await runPromtool(promtool, ["check", "rules", file]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

/** docs/install.md's section on the runbook base and the scrape job. */
function installSection(): string {
  const text = readFileSync(installPath, "utf8");
  const start = text.indexOf(`${INSTALL_SECTION}\n`);
  assert.ok(start >= 0, `docs/install.md has a section "${INSTALL_SECTION}"`);
  const end = text.indexOf("\n## ", start + 1);
  return end < 0 ? text.slice(start) : text.slice(start, end);
}

/** The rule groups as they should read once the runbook base and the job regex are replaced. */
function rewritten(from: RuleGroups, base: string, job: string): RuleGroups {
  return from.map((g) => ({
    ...g,
    rules: g.rules.map((r) => ({
      ...r,
      expr: g.name === SCRAPE_GROUP ? r.expr.replace(`"${DEFAULT_JOB}"`, `"${job}"`) : r.expr,
      annotations: { ...r.annotations, runbook_url: `${base}#${r.alert.toLowerCase()}` },
    })),
  }));
}

void test("docs/install.md's kustomize overlay sets the runbook base and the scrape job and changes nothing else", { skip: skipUnlessCI(kubectl) }, async () => {
  // Its YAML blocks, each headed by a comment naming its file.
  const files = new Map(
    [...installSection().matchAll(/```yaml\n# deploy\/overlays\/mine\/([\w.-]+)\n([\s\S]*?)```/g)].map((m) => [m[1] ?? "", m[2] ?? ""] as const),
  );
  assert.deepEqual([...files.keys()].sort(), ["alerting.yaml", "kustomization.yaml"]);
  const values = z
    .object({ data: z.object({ runbookBase: z.string(), scrapeJob: z.string() }) })
    .parse(parse(files.get("alerting.yaml") ?? "")).data;
  assert.notEqual(values.runbookBase, RUNBOOK_BASE, "the example changes the base");
  assert.notEqual(values.scrapeJob, DEFAULT_JOB, "the example changes the job");

  const dir = mkdtempSync(join(tmpdir(), "lostwrite-overlay-"));
  try {
    // The overlay at deploy/overlays/mine, its ../../base the real one.
    mkdirSync(join(dir, "deploy/overlays/mine"), { recursive: true });
    symlinkSync(join(ROOT, "deploy/base"), join(dir, "deploy/base"));
    symlinkSync(join(ROOT, "deploy/components"), join(dir, "deploy/components"));
    for (const [name, text] of files) writeFileSync(join(dir, "deploy/overlays/mine", name), text);
    const { stdout } = await execa(kubectl.path ?? assert.fail(kubectl.reason), ["kustomize", join(dir, "deploy/overlays/mine")]);
    const objects = parseAllDocuments(stdout).map((d) => d.toJS() as { kind?: string });
    assert.ok(!objects.some((o) => o.kind === "ConfigMap"), "the values object is local config, not applied to the cluster");
    const rendered = prometheusRule.parse(objects.find((o) => o.kind === "PrometheusRule"));
    const generated = prometheusRule.parse(parse(readFileSync(prometheusRulePath, "utf8")));
    assert.deepEqual(rendered.spec.groups, rewritten(generated.spec.groups, values.runbookBase, values.scrapeJob));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

void test("docs/install.md's sed for the plain rule file rewrites the same two values, and promtool accepts the result", { skip: skipUnlessCI(CURRENT_MONITORING.promtool) }, async () => {
  const promtool = CURRENT_MONITORING.promtool;
  const block = /```sh\n(sed [\s\S]*?)```/.exec(installSection())?.[1];
  assert.ok(block !== undefined, "the section has a sh block starting with sed");
  const dir = mkdtempSync(join(tmpdir(), "lostwrite-sed-"));
  try {
    const out = join(dir, "lostwrite.yaml");
    const script = block.replaceAll("/etc/prometheus/rules/lostwrite.yaml", out).replace(/^promtool /m, `${promtool.path ?? assert.fail(promtool.reason)} `);
    assert.notEqual(script, block, "the block writes /etc/prometheus/rules/lostwrite.yaml");
    const result = await execa("sh", ["-euc", script], { cwd: ROOT, reject: false, all: true });
    assert.equal(result.exitCode, 0, result.all);
    const base = /\|(https:[^|#]+)#\|'/.exec(block)?.[1];
    const job = /job=~"([^"]+)"\/'/.exec(block)?.[1];
    assert.ok(base !== undefined && job !== undefined, "the sed names a new base and a new job");
    const copied = z.object({ groups: ruleGroups }).parse(parse(readFileSync(out, "utf8"))).groups;
    assert.deepEqual(copied, rewritten(groups, base, job));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
