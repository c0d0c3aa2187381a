// Follows the dashboard's Jaeger trace link the way Grafana would, without a
// Grafana: the link's URL template comes from the generated dashboard JSON,
// its variables are filled as Grafana fills them for a clicked exemplar, and
// the Explore query it opens is turned into the request Grafana's Jaeger data
// source sends for it. That data source reads a query without a queryType
// (or with any but "search") as a trace id and asks the Jaeger query API at
// the data source's URL for GET /api/traces/{id}.
import { z } from "zod";
import { allPanels, loadDashboard, type Dashboard } from "./dashboardQueries.ts";

const link = z.object({ title: z.string(), url: z.string() }).loose();
const fieldConfig = z
  .object({
    overrides: z
      .array(
        z.object({
          matcher: z.object({ id: z.string(), options: z.unknown() }),
          properties: z.array(z.object({ id: z.string(), value: z.unknown() })),
        }),
      )
      .default([]),
  })
  .loose();

/**
 * The URL templates of the links on exemplars' `trace_id` field that open a
 * trace in the data source picked by the `${datasourceVariable}` variable, one
 * per panel that has one.
 */
export function exemplarTraceLinkTemplates(datasourceVariable: string, dashboard: Dashboard = loadDashboard()): { panel: string; title: string; url: string }[] {
  return allPanels(dashboard).flatMap((panel) => {
    const parsed = fieldConfig.safeParse((panel as { fieldConfig?: unknown }).fieldConfig);
    if (!parsed.success) return [];
    return parsed.data.overrides
      .filter((o) => o.matcher.id === "byName" && o.matcher.options === "trace_id")
      .flatMap((o) => o.properties.filter((p) => p.id === "links").flatMap((p) => z.array(link).parse(p.value)))
      .filter((l) => l.url.includes(`"datasource":"\${${datasourceVariable}}"`))
      .map((l) => ({ panel: panel.title, title: l.title, url: l.url }));
  });
}

/** Replaces every `${name}` of the template; a variable left without a value throws. */
export function fillLink(template: string, values: Record<string, string>): string {
  return template.replace(/\$\{([^}]+)\}/g, (whole, name: string) => {
    const value = values[name];
    if (value === undefined) throw new Error(`link variable ${whole} has no value (have: ${Object.keys(values).join(", ")})`);
    return value;
  });
}

const exploreState = z.object({
  datasource: z.string(),
  queries: z.array(z.object({ refId: z.string(), query: z.string().optional(), queryType: z.string().optional() }).loose()),
  range: z.object({ from: z.string(), to: z.string() }),
});

/**
 * The Jaeger query-API URL Grafana requests when the filled Explore link
 * `link` is opened, the data source uid resolved through `dataSources` (uid →
 * the data source's URL setting).
 */
export function jaegerRequestOfExploreLink(link: string, dataSources: Record<string, string>): string {
  const url = new URL(link, "http://grafana.invalid");
  if (url.pathname !== "/explore") throw new Error(`not an Explore link: ${link}`);
  const left = url.searchParams.get("left");
  if (left === null) throw new Error(`Explore link without a left pane: ${link}`);
  const state = exploreState.parse(JSON.parse(left));
  const base = dataSources[state.datasource];
  if (base === undefined) throw new Error(`link names data source "${state.datasource}", not one of ${Object.keys(dataSources).join(", ")}`);
  if (state.queries.length !== 1) throw new Error(`Jaeger's data source runs one query, the link has ${state.queries.length}`);
  const [query] = state.queries as [z.infer<typeof exploreState>["queries"][number]];
  if (query.queryType === "search" || !query.query) throw new Error(`not a trace-id query: ${JSON.stringify(query)}`);
  return `${base}/api/traces/${encodeURIComponent(query.query)}`;
}
