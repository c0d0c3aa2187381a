// The go-layout matrix as text for the test's output: one line per cell
// (families, what the agent finds, how it differs from the probe), the
// distinct layouts found beside the probe's, and the probed functions whose
// signature is not the same in every cell.
import type { CellBuild } from "../../../../testbed/go-matrix/buildCell.ts";
import type { GoLayoutReport, LayoutFamily, LayoutFamilyName } from "../../../../testbed/go-matrix/goLayout.ts";
import { PROBED_ROLES, readsOf, signatureText, type ProbeLayouts } from "./layoutComparison.ts";

export interface CellResult {
  build: CellBuild;
  layout: GoLayoutReport;
  /** The agent's inspection of the stripped build: its families, or why none. */
  agentSees: string;
  differences: string[];
  /** What the agent's table says the probe reads in this cell, per family. */
  probe: ProbeLayouts;
}

const pad = (text: string, width: number): string => text.padEnd(width);

function families(layout: GoLayoutReport): [LayoutFamilyName, LayoutFamily][] {
  return Object.entries(layout.families) as [LayoutFamilyName, LayoutFamily][];
}

function cellLines(results: readonly CellResult[]): string[] {
  const lines = [`${pad("cell", 36)} ${pad("build", 14)} ${pad("families: functions found", 28)} ${pad("differs from the probe", 24)} agent follows`];
  for (const r of results) {
    const found = families(r.layout).map(([name, f]) => `${name} ${Object.keys(f.functions).length}/${PROBED_ROLES.length}`).join(", ") || "none";
    const build = `${r.build.seconds.toFixed(1)} s ${r.build.cached ? "cached" : "built"}`;
    const n = r.differences.length;
    const differs = n === 0 ? "no" : `${n} difference${n === 1 ? "" : "s"}`;
    lines.push(`${pad(r.build.cell.id, 36)} ${pad(build, 14)} ${pad(found, 28)} ${pad(differs, 24)} ${r.agentSees}`);
  }
  return lines;
}

/** The distinct layouts the agent's table gives across the cells, each named by the families that use it. */
function probeColumnsOf(results: readonly CellResult[]): [string, Record<string, number>][] {
  const columns = new Map<string, { names: Set<string>; offsets: Record<string, number> }>();
  for (const r of results) {
    for (const [name, offsets] of Object.entries(r.probe) as [string, Record<string, number>][]) {
      const key = JSON.stringify(Object.entries(offsets).sort());
      const column = columns.get(key) ?? { names: new Set<string>(), offsets };
      column.names.add(name);
      columns.set(key, column);
    }
  }
  return [...columns.values()].map((c) => [[...c.names].join("+"), c.offsets]);
}

/** Distinct offset sets, lettered, against the probe's columns. */
function offsetLines(results: readonly CellResult[]): string[] {
  const layouts = new Map<string, { offsets: Record<string, number | string>; users: string[] }>();
  for (const r of results) {
    for (const [name, family] of families(r.layout)) {
      const reads = readsOf(r.layout, family);
      const offsets: Record<string, number | string> = { ...reads.offsets };
      for (const key of Object.keys(reads.missing)) offsets[key] = "missing";
      const key = JSON.stringify(Object.entries(offsets).sort());
      const entry = layouts.get(key) ?? { offsets, users: [] };
      entry.users.push(`${r.build.cell.id} ${name}`);
      layouts.set(key, entry);
    }
  }
  const lettered = [...layouts.values()].map((l, i) => ({ ...l, letter: String.fromCharCode(65 + i) }));
  const probeColumns = probeColumnsOf(results);
  const reads = [...new Set([...probeColumns.flatMap(([, o]) => Object.keys(o)), ...lettered.flatMap((l) => Object.keys(l.offsets))])].sort();
  const header = [pad("read", 30), ...probeColumns.map(([name]) => pad(`probe ${name}`, 12)), ...lettered.map((l) => pad(l.letter, 8))].join(" ");
  const lines = ["offsets (bytes from the pointer the probe holds); A, B, …: the distinct layouts found", header];
  for (const read of reads) {
    const row = [pad(read, 30), ...probeColumns.map(([, o]) => pad(String(o[read] ?? "-"), 12))];
    for (const l of lettered) {
      const value = l.offsets[read];
      const differs = probeColumns.some(([, o]) => o[read] !== undefined) && probeColumns.every(([, o]) => o[read] !== value);
      row.push(pad(`${value ?? "-"}${differs ? "*" : ""}`, 8));
    }
    lines.push(row.join(" "));
  }
  lines.push("(* differs from every probe column)");
  for (const l of lettered) lines.push(`${l.letter}: ${l.users.join("; ")}`);
  return lines;
}

/** The probed functions whose parameters (family package left out) are not the same everywhere. */
function signatureLines(results: readonly CellResult[]): string[] {
  const lines = ["signatures that differ between cells or families (family package shown as ~):"];
  for (const role of PROBED_ROLES) {
    const variants = new Map<string, string[]>();
    for (const r of results) {
      for (const [name, family] of families(r.layout)) {
        const text = signatureText(family, role).replace(/(net\/http\/internal\/http2\.|golang\.org\/x\/net\/http2\.|net\/http\.http2)(?=[A-Za-z])/g, "~");
        variants.set(text, [...(variants.get(text) ?? []), `${r.build.cell.id} ${name}`]);
      }
    }
    if (variants.size < 2) continue;
    lines.push(`  ${role}:`);
    for (const [text, users] of variants) lines.push(`    (${text})  ← ${users.join("; ")}`);
  }
  return lines.length === 1 ? [...lines, "  none"] : lines;
}

/** The family struct sizes that are not the same everywhere: the layouts did change, around the fields read. */
function sizeLines(results: readonly CellResult[]): string[] {
  const rows = results.flatMap((r) => families(r.layout).map(([name, f]) => ({ label: `${r.build.cell.id} ${name}`, sizes: f.sizes })));
  const types = [...new Set(rows.flatMap((row) => Object.keys(row.sizes)))].sort();
  const varying = types.filter((t) => new Set(rows.map((row) => row.sizes[t])).size > 1);
  if (varying.length === 0) return ["struct sizes: the same in every cell and family"];
  return [
    "struct sizes that differ (bytes):",
    `  ${pad("", 42)} ${varying.map((t) => pad(t, 14)).join(" ")}`,
    ...rows.map((row) => `  ${pad(row.label, 42)} ${varying.map((t) => pad(String(row.sizes[t] ?? "-"), 14)).join(" ")}`),
  ];
}

/** Each family's differences, per cell. */
function differenceLines(results: readonly CellResult[]): string[] {
  return results.flatMap((r) => (r.differences.length === 0 ? [] : [`${r.build.cell.id}:`, ...r.differences.map((d) => `  ${d}`)]));
}

export function layoutMatrixTable(results: readonly CellResult[]): string {
  return [...cellLines(results), "", ...offsetLines(results), "", ...signatureLines(results), "", ...sizeLines(results), "", ...differenceLines(results)].join("\n");
}
