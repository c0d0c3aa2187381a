// The dashboards' template variables and the label selectors built from them.
// The agent does not know its cluster or node (docs/metrics.md, "Labels added
// by the scrape"), so `cluster` and `node` match everything, absent included,
// when the scrape does not set them: every "All" is the regex ".*".
import * as dashboard from "@grafana/grafana-foundation-sdk/dashboard";
import { PROMETHEUS } from "./panels.ts";

/** Series of one agent: every lostwrite metric has these. */
export const AGENT = `cluster=~"$cluster", node=~"$node"`;
/** Series of a watched workload: the agent's `namespace` label names the operator's namespace. */
export const WORKLOAD = `${AGENT}, namespace=~"$namespace"`;
/** Loss series: only lostwrite_status_write_lost_total carries `controller`. */
export const LOSS = `${WORKLOAD}, controller=~"$controller"`;

function dataSource(name: string, label: string, plugin: string, description: string): dashboard.DatasourceVariableBuilder {
  return new dashboard.DatasourceVariableBuilder(name).label(label).type(plugin).description(description);
}

/**
 * A label's values as a drop-down, "All" by default and matching series
 * without the label; `pickOne`: no "All", one value (a drill-down's subject).
 */
export function labelValues(
  name: string,
  label: string,
  description: string,
  selector: string,
  opts: { multi: boolean; pickOne?: boolean },
): dashboard.QueryVariableBuilder {
  const query = `label_values(${selector}, ${name})`;
  const variable = new dashboard.QueryVariableBuilder(name)
    .label(label)
    .description(description)
    .datasource(PROMETHEUS)
    .definition(query)
    .query({ query, refId: `${name}-values` })
    .refresh(dashboard.VariableRefresh.OnTimeRangeChanged)
    .sort(dashboard.VariableSort.AlphabeticalAsc);
  if (opts.pickOne) return variable.includeAll(false).multi(false);
  return variable
    .includeAll(true)
    .allValue(".*")
    .multi(opts.multi)
    .current(opts.multi ? { selected: true, text: ["All"], value: ["$__all"] } : { selected: true, text: "All", value: "$__all" });
}

export const prometheusVariable = dataSource("datasource", "Prometheus", "prometheus", "Prometheus that scrapes the lostwrite agents.");

export const clusterVariable = labelValues(
  "cluster",
  "Cluster",
  "The cluster label, from Prometheus external_labels or the federation/remote-write layer; matches everything when it is not set.",
  "lostwrite_probe_up",
  { multi: false },
);

export const nodeVariable = labelValues(
  "node",
  "Node",
  "The node label the scrape config copies from __meta_kubernetes_pod_node_name (see docs/metrics.md); matches everything when it is not set.",
  `lostwrite_probe_up{cluster=~"$cluster"}`,
  { multi: true },
);

export const namespaceVariable = labelValues(
  "namespace",
  "Namespace",
  "Namespace of the watched operator pods (empty outside Kubernetes).",
  `lostwrite_apiserver_writes_total{${AGENT}}`,
  { multi: true },
);

export const controllerVariable = labelValues(
  "controller",
  "Controller",
  "Controller that lost writes. Only lostwrite_status_write_lost_total carries it: other panels ignore this filter.",
  `lostwrite_status_write_lost_total{${WORKLOAD}}`,
  { multi: true },
);

export const tempoVariable = dataSource("tempo", "Tempo", "tempo", "Tempo data source for the links from loss panels to traces.");
export const jaegerVariable = dataSource("jaeger", "Jaeger", "jaeger", "Jaeger data source for the links from loss panels to traces.");

/**
 * The count a counter gained within the dashboard's range, with series born
 * within it counted whole: increase() needs two samples of a series, so a
 * first loss (its series created with the value 1) is invisible to it alone
 * (docs/metrics.md, "New series and increase()").
 */
export function gainedInRange(series: string): string {
  return `(increase(${series}[$__range]) and ${series} offset $__range) or (${series} unless ${series} offset $__range)`;
}
