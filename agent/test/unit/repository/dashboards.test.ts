// Lint for dashboards/lostwrite.json: the dashboard on-call opens must be
// importable into any Grafana with any Prometheus data source, say what every
// panel shows and in which unit, use only metrics the agent exports and the
// docs describe, and every query must be PromQL that Prometheus parses.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { z } from "zod";
import { AgentMetrics } from "../../../src/telemetry/metrics.ts";
import { allPanels, dashboardPath, dashboardQueries, loadDashboard } from "../../e2e/support/dashboardQueries.ts";
import { MONITORING_GENERATIONS, skipUnlessCI } from "../../e2e/support/tools.ts";
import { repoPath } from "../../repoPath.ts";

const raw: unknown = JSON.parse(readFileSync(dashboardPath, "utf8"));
const dashboard = loadDashboard();
const alertsYaml = readFileSync(repoPath("dashboards/alerts.yaml"), "utf8");
const metricsDoc = readFileSync(repoPath("docs/metrics.md"), "utf8");

const datasourceRef = z.object({ type: z.literal("prometheus"), uid: z.literal("${datasource}") });
const dataPanel = z.object({
  title: z.string(),
  description: z.string().min(20),
  datasource: datasourceRef,
  targets: z.array(z.object({ datasource: datasourceRef, expr: z.string().min(1), exemplar: z.boolean().optional() })).min(1),
  fieldConfig: z.object({
    defaults: z.object({
      unit: z.string().min(1),
      links: z.array(z.object({ title: z.string(), url: z.string() })).optional(),
    }),
  }),
});
const panels = allPanels(dashboard);
const rows = panels.filter((p) => p.type === "row");
const dataPanels = panels.filter((p) => p.type !== "row");

void test("the dashboard is a current Grafana schema with a Prometheus data source variable", () => {
  const top = z
    .object({ schemaVersion: z.number().min(39), uid: z.string().min(1), title: z.string().min(1), id: z.null() })
    .parse(raw);
  assert.ok(top.schemaVersion >= 39);
  const variables = new Map(dashboard.templating.list.map((v) => [v.name, v]));
  assert.deepEqual(
    z.object({ type: z.literal("datasource"), query: z.literal("prometheus") }).safeParse(variables.get("datasource")).success,
    true,
    "a datasource variable named datasource of plugin prometheus",
  );
  for (const name of ["cluster", "node", "namespace", "controller"]) {
    const v = z
      .object({ type: z.literal("query"), includeAll: z.literal(true), allValue: z.literal(".*"), datasource: datasourceRef })
      .safeParse(variables.get(name));
    assert.ok(v.success, `variable ${name}: ${v.success ? "" : z.prettifyError(v.error)}`);
  }
});

void test("rows follow on-call's questions in order", () => {
  assert.deepEqual(
    rows.map((r) => r.title),
    [
      "Are status writes being lost right now? Where, how badly?",
      "Why? Errors, connections, network",
      "Is the agent healthy?",
    ],
  );
});

void test("every panel uses the datasource variable and has a unit and a description", () => {
  assert.ok(dataPanels.length >= 20);
  for (const p of dataPanels) {
    const result = dataPanel.safeParse(p);
    assert.ok(result.success, `panel "${p.title}": ${result.success ? "" : z.prettifyError(result.error)}`);
  }
  const titles = dataPanels.map((p) => p.title);
  assert.equal(new Set(titles).size, titles.length, "panel titles are unique (runbooks refer to them)");
});

const traceLinked = z.object({
  targets: z.array(z.object({ exemplar: z.boolean().optional() })),
  fieldConfig: z.object({
    defaults: z.object({ links: z.array(z.object({ url: z.string() })).optional() }),
    overrides: z.array(
      z.object({
        matcher: z.object({ id: z.string(), options: z.unknown() }),
        properties: z.array(z.object({ id: z.string(), value: z.unknown() })),
      }),
    ),
  }),
});
const links = z.array(z.object({ title: z.string(), url: z.string() }));

void test("loss panels request exemplars and link to the trace in Tempo and Jaeger from the exemplar's trace_id", () => {
  for (const title of ["Lost writes/s by controller and cause", "Silent vs noticed losses/s", "Lost writes/s by errno"]) {
    const p = traceLinked.parse(dataPanels.find((x) => x.title === title));
    assert.ok(p.targets.every((t) => t.exemplar === true), `${title}: exemplars`);
    // The links sit on the exemplar's trace_id field (the agent's exemplar label),
    // not on the series, whose points have no trace id to interpolate.
    assert.ok(!(p.fieldConfig.defaults.links ?? []).some((l) => l.url.includes("trace_id")), `${title}: a trace link on the series`);
    const traceIdLinks = p.fieldConfig.overrides
      .filter((o) => o.matcher.id === "byName" && o.matcher.options === "trace_id")
      .flatMap((o) => o.properties.filter((prop) => prop.id === "links").flatMap((prop) => links.parse(prop.value)));
    for (const backend of ["${tempo}", "${jaeger}"]) {
      assert.ok(
        traceIdLinks.some((l) => l.url.includes(backend) && l.url.includes("${__data.fields.trace_id}")),
        `${title}: no trace link to ${backend} on the exemplar's trace_id`,
      );
    }
  }
});

void test("every alert a panel names is a rule in dashboards/alerts.yaml", () => {
  const rules = new Set([...alertsYaml.matchAll(/^\s*- alert: (\w+)$/gm)].map((m) => m[1]));
  assert.ok(rules.size > 0);
  const named = [...JSON.stringify(raw).matchAll(/\bLostwrite[A-Z]\w+/g)].map(([name]) => name);
  assert.ok(named.length > 0);
  for (const name of named) assert.ok(rules.has(name), `the dashboard names alert ${name}, which dashboards/alerts.yaml does not have`);
});

/** lostwrite_… names in a PromQL text, with histogram series suffixes folded to the metric. */
function metricNames(promql: string, histograms: Set<string>): string[] {
  return [...promql.matchAll(/\blostwrite_\w+/g)].map(([name]) => {
    const base = name.replace(/_(bucket|sum|count)$/, "");
    return histograms.has(base) ? base : name;
  });
}

void test("every metric used in a panel, a variable or an alert is exported and documented", async () => {
  const exported = await new AgentMetrics().registry.getMetricsAsJSON();
  const names = new Set(exported.map((m) => m.name));
  const histograms = new Set(exported.filter((m) => String(m.type) === "histogram").map((m) => m.name));
  const sources = [
    ...dataPanels.flatMap((p) => (p.targets ?? []).map((t) => ({ where: `panel "${p.title}"`, text: t.expr }))),
    ...dashboard.templating.list.map((v) => ({ where: `variable ${v.name}`, text: JSON.stringify(v) })),
    { where: "dashboards/alerts.yaml", text: alertsYaml },
  ];
  let used = 0;
  for (const { where, text } of sources) {
    for (const name of metricNames(text, histograms)) {
      used++;
      assert.ok(names.has(name), `${where} uses ${name}, which AgentMetrics does not export`);
      assert.ok(metricsDoc.includes(`\`${name}\``), `${where} uses ${name}, which docs/metrics.md does not list`);
    }
  }
  assert.ok(used > 0);
});

void test("the dashboard shows every metric the agent exports", async () => {
  const exported = await new AgentMetrics().registry.getMetricsAsJSON();
  const histograms = new Set(exported.filter((m) => String(m.type) === "histogram").map((m) => m.name));
  const shown = new Set(dataPanels.flatMap((p) => (p.targets ?? []).flatMap((t) => metricNames(t.expr, histograms))));
  for (const { name } of exported) assert.ok(shown.has(name), `no panel shows ${name}`);
});

// Every Prometheus generation users run parses them.
for (const { name, promtool } of MONITORING_GENERATIONS) void test(`every panel query and variable selector is PromQL that promtool parses (${name})`, { skip: skipUnlessCI(promtool) }, async () => {
  const queries = dashboardQueries();
  // label_values(<selector>, <label>): the selector is PromQL too.
  const selectors = dashboard.templating.list.flatMap((v) => {
    const definition = z.object({ definition: z.string() }).safeParse(v);
    const match = definition.success ? /^label_values\((.+),\s*\w+\)$/.exec(definition.data.definition) : null;
    return match?.[1] ? [{ panel: `variable ${v.name}`, expr: match[1].replace(/\$(\w+)/g, ".*") }] : [];
  });
  assert.ok(selectors.length >= 4, "the query variables' label_values selectors were found");
  // One group per query, named after its panel, so promtool's error names the panel.
  const ruleFile = {
    groups: [...queries, ...selectors].map((q, i) => ({
      name: q.panel,
      rules: [{ record: `lostwrite_dashboard:query_${i}`, expr: q.expr }],
    })),
  };
  const dir = mkdtempSync(join(tmpdir(), "lostwrite-dashboard-"));
  try {
    const file = join(dir, "dashboard-queries.yaml");
    writeFileSync(file, JSON.stringify(ruleFile, null, 2));
    const result = await execa(promtool.path ?? assert.fail(promtool.reason), ["check", "rules", file], {
      reject: false,
      all: true,
    });
    assert.equal(result.exitCode, 0, `promtool rejected a dashboard query:\n${result.all}`);
    assert.match(result.all, new RegExp(`SUCCESS: ${ruleFile.groups.length} rules found`));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

void test("dashboardQueries() returns every panel target, fully substituted", () => {
  // Guards the promtool check above against an extractor that skips queries.
  const queries = dashboardQueries();
  assert.equal(queries.length, dataPanels.reduce((n, p) => n + (p.targets?.length ?? 0), 0));
  for (const q of queries) assert.doesNotMatch(q.expr, /\$/, `${q.panel}: unsubstituted variable`);
});
