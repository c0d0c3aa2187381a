// Links from a loss to the operator's trace, which holds the agent's
// `status write lost` span. Grafana Explore URLs for the data sources picked
// in the `tempo` and `jaeger` variables, over the dashboard's time range.
import type * as dashboard from "@grafana/grafana-foundation-sdk/dashboard";
import type { PanelLink } from "./panels.ts";

/** The span the agent exports for every loss with a matched span (docs/metrics.md, "Exemplars and traces"). */
const LOSS_SPAN_NAME = "status write lost";

function explore(datasource: string, query: Record<string, string>): string {
  const left = { datasource, queries: [{ refId: "A", ...query }], range: { from: "${__from}", to: "${__to}" } };
  return `/explore?left=${JSON.stringify(left)}`;
}

/** Panel link: every loss span in the range, to browse when no exemplar is at hand. */
export const allLossSpansInTempo: PanelLink = {
  title: "All lost-write spans in Tempo",
  url: explore("${tempo}", { queryType: "traceql", query: `{ name = "${LOSS_SPAN_NAME}" }` }),
};

/**
 * Data links on the `trace_id` field of an exemplar (the label the agent puts
 * on the loss counter's exemplars), not on the series: a series' points carry
 * no trace id to fill in.
 */
export const exemplarTraceLinks: { byName: string; properties: dashboard.DynamicConfigValue[] } = {
  byName: "trace_id",
  properties: [
    {
      id: "links",
      value: [
        {
          title: "Trace of this loss in Tempo (exemplar)",
          url: explore("${tempo}", { queryType: "traceql", query: "${__data.fields.trace_id}" }),
          targetBlank: true,
        },
        {
          title: "Trace of this loss in Jaeger (exemplar)",
          url: explore("${jaeger}", { query: "${__data.fields.trace_id}" }),
          targetBlank: true,
        },
      ],
    },
  ],
};
