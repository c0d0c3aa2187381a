// Lint for dashboards/lostwrite-operator.json, the drill-down for one
// operator, as dashboards.test.ts does for the on-call dashboard: every panel
// says what it shows and in which unit, uses only metrics the agent exports
// and the docs describe, and every query is PromQL that Prometheus parses; the
// on-call dashboard's link into it carries variables it has.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { AgentMetrics } from "../../../src/telemetry/metrics.ts";
import { allPanels, dashboardQueries, loadDashboard } from "../../e2e/support/dashboardQueries.ts";
import { MONITORING_GENERATIONS, skipUnlessCI } from "../../e2e/support/tools.ts";
import { repoPath } from "../../repoPath.ts";

const operatorPath = repoPath("dashboards/lostwrite-operator.json");
const operator = loadDashboard(operatorPath);
const onCall = loadDashboard();
const metricsDoc = readFileSync(repoPath("docs/metrics.md"), "utf8");
const alertsYaml = readFileSync(repoPath("dashboards/alerts.yaml"), "utf8");
const dataPanels = allPanels(operator).filter((p) => p.type !== "row");

interface PanelFields {
  description?: string;
  datasource?: { uid?: string };
  targets?: { expr: string; exemplar?: boolean; datasource?: { uid?: string } }[];
  fieldConfig?: { defaults?: { unit?: string; links?: { url: string }[] }; overrides?: { matcher: { options?: unknown }; properties: { id: string; value?: unknown }[] }[] };
}
const fields = (p: unknown): PanelFields => p as PanelFields;

void test("every panel reads the datasource variable and has a unit and a description", () => {
  assert.ok(dataPanels.length >= 8);
  for (const p of dataPanels) {
    const f = fields(p);
    assert.equal(f.datasource?.uid, "${datasource}", p.title);
    assert.ok((f.description ?? "").length >= 20, `${p.title}: description`);
    assert.ok(f.fieldConfig?.defaults?.unit, `${p.title}: unit`);
    for (const t of f.targets ?? []) assert.equal(t.datasource?.uid, "${datasource}", p.title);
  }
});

void test("every metric it uses is exported and documented, every alert it names exists", async () => {
  const exported = new Set((await new AgentMetrics().registry.getMetricsAsJSON()).map((m) => m.name));
  const text = JSON.stringify(operator);
  const names = [...text.matchAll(/\blostwrite_\w+/g)].map(([n]) => n);
  assert.ok(names.length > 0);
  for (const name of names) {
    assert.ok(exported.has(name), `${name} is not exported`);
    assert.ok(metricsDoc.includes(`\`${name}\``), `${name} is not in docs/metrics.md`);
  }
  for (const [alert] of text.matchAll(/\bLostwrite[A-Z]\w+/g)) assert.match(alertsYaml, new RegExp(`- alert: ${alert}$`, "m"));
});

void test("the loss panel requests exemplars and links their trace_id to Tempo and Jaeger", () => {
  const loss = fields(dataPanels.find((p) => p.title === "Lost writes/s by controller, cause and noticed"));
  assert.ok(loss.targets?.every((t) => t.exemplar === true));
  const urls = JSON.stringify(loss.fieldConfig?.overrides?.filter((o) => o.matcher.options === "trace_id"));
  for (const backend of ["${tempo}", "${jaeger}"]) assert.ok(urls.includes(backend) && urls.includes("${__data.fields.trace_id}"), backend);
});

void test("the on-call dashboard's loss table opens this one with variables it has", () => {
  const table = fields(allPanels(onCall).find((p) => p.title === "Losses in range by workload"));
  const link = table.fieldConfig?.defaults?.links?.find((l) => l.url.startsWith("/d/lostwrite-operator?"));
  assert.ok(link, "a data link to /d/lostwrite-operator");
  assert.equal((JSON.parse(readFileSync(operatorPath, "utf8")) as { uid: string }).uid, "lostwrite-operator");
  const names = new Set(operator.templating.list.map((v) => v.name));
  const carried = [...link.url.matchAll(/\$\{(\w+):queryparam\}|var-(\w+)=/g)].map((m) => m[1] ?? m[2] ?? "");
  assert.ok(carried.length >= 4);
  for (const name of carried) assert.ok(names.has(name), `the link sets ${name}, which the operator dashboard has no variable for`);
});

for (const { name, promtool } of MONITORING_GENERATIONS) void test(`every panel query is PromQL that promtool parses (${name})`, { skip: skipUnlessCI(promtool) }, async () => {
  const queries = dashboardQueries({}, operator);
  assert.equal(queries.length, dataPanels.reduce((n, p) => n + (p.targets?.length ?? 0), 0));
  const ruleFile = { groups: queries.map((q, i) => ({ name: q.panel, rules: [{ record: `lostwrite_operator_dashboard:query_${i}`, expr: q.expr }] })) };
  const dir = mkdtempSync(join(tmpdir(), "lostwrite-operator-dashboard-"));
  try {
    const file = join(dir, "queries.yaml");
    writeFileSync(file, JSON.stringify(ruleFile));
    const result = await execa(promtool.path ?? assert.fail(promtool.reason), ["check", "rules", file], { reject: false, all: true });
    assert.equal(result.exitCode, 0, `promtool rejected a query:\n${result.all}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
