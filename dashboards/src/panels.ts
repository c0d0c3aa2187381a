// The few panel shapes the lostwrite dashboards use, on top of the Grafana
// Foundation SDK's builders. A dashboard module then says per panel only what
// on-call reads: title, description, unit, queries, position. Everything that
// is the same on every panel of a kind (legend as a table with max and last,
// shared tooltip, thin lines) is decided once, here.
import type * as cog from "@grafana/grafana-foundation-sdk/cog";
import * as common from "@grafana/grafana-foundation-sdk/common";
import * as dashboard from "@grafana/grafana-foundation-sdk/dashboard";
import { DataqueryBuilder, PromQueryFormat, QueryEditorMode } from "@grafana/grafana-foundation-sdk/prometheus";
import { PanelBuilder as StatPanelBuilder } from "@grafana/grafana-foundation-sdk/stat";
import { PanelBuilder as TablePanelBuilder } from "@grafana/grafana-foundation-sdk/table";
import { PanelBuilder as TimeseriesPanelBuilder } from "@grafana/grafana-foundation-sdk/timeseries";

/** Every panel and query variable reads the Prometheus picked in the `datasource` variable. */
export const PROMETHEUS = { type: "prometheus", uid: "${datasource}" };

interface Query {
  expr: string;
  legend: string;
  /** Ask Prometheus for exemplars: the loss counter carries the trace of its latest loss. */
  exemplar?: boolean;
}

/** Where a panel sits: Grafana's grid is 24 columns wide. */
interface Position {
  x: number;
  y: number;
  w: number;
  h: number;
}

interface PanelCommon {
  /** Fixed ids: a panel link (`viewPanel=<id>`) kept in a runbook or a chat survives a regeneration. */
  id: number;
  title: string;
  /** What the panel shows and what to do about it: on-call reads it in the panel's (i) tooltip. */
  description: string;
  unit: string;
  at: Position;
  queries: Query[];
  decimals?: number;
  /** Links in the panel's header menu. */
  links?: PanelLink[];
}

export interface PanelLink {
  title: string;
  url: string;
}

/** Colours by value: the first step applies from minus infinity. */
type Steps = [firstColor: string, ...rest: { from: number; color: string }[]];

function thresholds(steps: Steps): dashboard.ThresholdsConfigBuilder {
  const [first, ...rest] = steps;
  return new dashboard.ThresholdsConfigBuilder()
    .mode(dashboard.ThresholdsMode.Absolute)
    .steps([{ color: first, value: null }, ...rest.map((s) => ({ color: s.color, value: s.from }))]);
}

const refIds = "ABCDEFGHIJ";

function targets(queries: Query[], kind: "range" | "instant"): DataqueryBuilder[] {
  return queries.map((q, i) => {
    const target = new DataqueryBuilder()
      .datasource(PROMETHEUS)
      .refId(refIds[i] ?? `Q${i}`)
      .expr(q.expr)
      .legendFormat(q.legend)
      .editorMode(QueryEditorMode.Code);
    if (kind === "instant") target.instant().format(PromQueryFormat.Table);
    else target.range();
    if (q.exemplar) target.exemplar(true);
    return target;
  });
}

/**
 * A panel's header link is a plain data link (title, url, new tab). The SDK
 * types panel links as dashboard links, whose builder adds what only a link
 * in the dashboard's controls uses (type, icon, tags, dropdown, placement):
 * this builder gives the panel link alone.
 */
function panelLinks(links: PanelLink[]): cog.Builder<dashboard.DashboardLink>[] {
  return links.map((l) => ({ build: () => ({ title: l.title, url: l.url, targetBlank: true }) as dashboard.DashboardLink }));
}

/** One big number, coloured by thresholds: the first row's "is it bad right now". */
export function statPanel(p: PanelCommon & { steps: Steps; mappings?: dashboard.ValueMapping[] }): StatPanelBuilder {
  const panel = new StatPanelBuilder()
    .id(p.id)
    .title(p.title)
    .description(p.description)
    .datasource(PROMETHEUS)
    .gridPos(p.at)
    .targets(targets(p.queries, "range"))
    .unit(p.unit)
    .thresholds(thresholds(p.steps))
    .reduceOptions(new common.ReduceDataOptionsBuilder().calcs(["lastNotNull"]).fields("").values(false))
    .colorMode(common.BigValueColorMode.Background)
    .graphMode(common.BigValueGraphMode.Area)
    .justifyMode(common.BigValueJustifyMode.Auto)
    .textMode(common.BigValueTextMode.Auto)
    .orientation(common.VizOrientation.Auto);
  if (p.decimals !== undefined) panel.decimals(p.decimals);
  if (p.mappings) panel.mappings(p.mappings);
  if (p.links) panel.links(panelLinks(p.links));
  return panel;
}

/** Lines over time, never below 0, the legend a table with each series' max and last value. */
export function timeseriesPanel(
  p: PanelCommon & {
    /** Per-series settings: a colour or a display name by series name, data links on a field. */
    overrides?: { byName: string; properties: dashboard.DynamicConfigValue[] }[];
    /** A threshold drawn as a line across the graph (the alert's level). */
    thresholdLine?: Steps;
  },
): TimeseriesPanelBuilder {
  const panel = new TimeseriesPanelBuilder()
    .id(p.id)
    .title(p.title)
    .description(p.description)
    .datasource(PROMETHEUS)
    .gridPos(p.at)
    .targets(targets(p.queries, "range"))
    .unit(p.unit)
    .min(0)
    .drawStyle(common.GraphDrawStyle.Line)
    .lineWidth(1)
    .fillOpacity(10)
    .showPoints(common.VisibilityMode.Never)
    .spanNulls(false)
    .legend(
      new common.VizLegendOptionsBuilder()
        .displayMode(common.LegendDisplayMode.Table)
        .placement(common.LegendPlacement.Bottom)
        .showLegend(true)
        .calcs(["max", "lastNotNull"]),
    )
    .tooltip(new common.VizTooltipOptionsBuilder().mode(common.TooltipDisplayMode.Multi).sort(common.SortOrder.Descending));
  if (p.decimals !== undefined) panel.decimals(p.decimals);
  if (p.thresholdLine) {
    panel.thresholds(thresholds(p.thresholdLine));
    panel.thresholdsStyle(new common.GraphThresholdsStyleConfigBuilder().mode(common.GraphThresholdsStyleMode.Line));
  }
  for (const o of p.overrides ?? []) panel.overrideByName(o.byName, o.properties);
  if (p.links) panel.links(panelLinks(p.links));
  return panel;
}

/** One instant query shown as rows: each series a row, its labels the columns; `rowLinks` open from any cell, in the same tab. */
export function tablePanel(p: PanelCommon & { transformations: dashboard.DataTransformerConfig[]; rowLinks?: PanelLink[] }): TablePanelBuilder {
  const panel = new TablePanelBuilder()
    .id(p.id)
    .title(p.title)
    .description(p.description)
    .datasource(PROMETHEUS)
    .gridPos(p.at)
    .targets(targets(p.queries, "instant"))
    .unit(p.unit)
    .showHeader(true)
    .cellHeight(common.TableCellHeight.Sm)
    .footer(new common.TableFooterOptionsBuilder().show(false).reducer(["sum"]))
    .transformations(p.transformations);
  if (p.decimals !== undefined) panel.decimals(p.decimals);
  if (p.rowLinks) panel.dataLinks(p.rowLinks.map((l) => ({ build: () => ({ title: l.title, url: l.url }) as dashboard.DashboardLink })));
  if (p.links) panel.links(panelLinks(p.links));
  return panel;
}

/** A row heading spanning the dashboard: on-call's question that the panels below answer. */
export function row(id: number, title: string, y: number): dashboard.RowBuilder {
  return new dashboard.RowBuilder(title).id(id).collapsed(false).gridPos({ x: 0, y, w: 24, h: 1 });
}

/** A series drawn in a fixed colour, optionally under another name. */
export function seriesStyle(byName: string, color: string, displayName?: string): { byName: string; properties: dashboard.DynamicConfigValue[] } {
  const properties: dashboard.DynamicConfigValue[] = [{ id: "color", value: { mode: "fixed", fixedColor: color } }];
  if (displayName) properties.push({ id: "displayName", value: displayName });
  return { byName, properties };
}
