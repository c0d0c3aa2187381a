// Reads the PromQL of every panel of dashboards/lostwrite.json the way Grafana
// would send it to Prometheus, with the template variables replaced by
// match-all regexes, so tests can run each query against a real Prometheus
// (e2e) or have promtool parse it (unit).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { z } from "zod";

export const dashboardPath = fileURLToPath(new URL("../../../../dashboards/lostwrite.json", import.meta.url));

const target = z.object({ refId: z.string(), expr: z.string() }).loose();
const panelBase = z
  .object({ id: z.number(), type: z.string(), title: z.string(), targets: z.array(target).optional() })
  .loose();
type PanelJson = z.infer<typeof panelBase> & { panels?: PanelJson[] };
const panel: z.ZodType<PanelJson> = panelBase.extend({ panels: z.lazy(() => z.array(panel)).optional() });
const variable = z.object({ name: z.string(), type: z.string() }).loose();
export const dashboardSchema = z
  .object({
    panels: z.array(panel),
    templating: z.object({ list: z.array(variable) }),
  })
  .loose();
export type Dashboard = z.infer<typeof dashboardSchema>;

export function loadDashboard(path: string = dashboardPath): Dashboard {
  return dashboardSchema.parse(JSON.parse(readFileSync(path, "utf8")));
}

/** Every panel, with the panels of collapsed rows (which Grafana nests) flattened in. */
export function allPanels(dashboard: Dashboard): PanelJson[] {
  return dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
}

export interface DashboardQuery {
  /** Panel title, with the target's refId when the panel has several queries. */
  panel: string;
  expr: string;
}

export interface QueryOptions {
  /** What Grafana's $__rate_interval becomes (it depends on scrape interval and zoom). */
  rateInterval?: string;
  /** What $__range becomes (the dashboard's time range). */
  range?: string;
}

/**
 * The PromQL of every panel target with template variables substituted:
 * query variables become ".*" (the dashboard's "All" value), $__rate_interval
 * and $__range the given durations. An unknown variable throws, so a variable
 * added to the dashboard cannot slip past the tests untranslated.
 */
export function dashboardQueries(options: QueryOptions = {}, dashboard: Dashboard = loadDashboard()): DashboardQuery[] {
  const builtins: Record<string, string> = {
    __rate_interval: options.rateInterval ?? "1m",
    __range: options.range ?? "1h",
  };
  const matchAll = new Set(dashboard.templating.list.filter((v) => v.type === "query").map((v) => v.name));
  const substitute = (expr: string, where: string): string =>
    expr.replace(/\$\{(\w+)\}|\$(\w+)/g, (_, braced: string | undefined, bare: string | undefined) => {
      const name = braced ?? bare ?? "";
      const builtin = builtins[name];
      if (builtin !== undefined) return builtin;
      if (matchAll.has(name)) return ".*";
      throw new Error(`${where}: unknown template variable $${name} in ${JSON.stringify(expr)}`);
    });
  const queries: DashboardQuery[] = [];
  for (const p of allPanels(dashboard)) {
    const targets = p.targets ?? [];
    for (const t of targets) {
      const name = targets.length > 1 ? `${p.title} [${t.refId}]` : p.title;
      queries.push({ panel: name, expr: substitute(t.expr, name) });
    }
  }
  return queries;
}
