// The benches' tables: columns padded to their widest cell, the first `left`
// columns aligned left (names), the rest right (numbers), a dashed rule under
// the header.
export function textTable(header: string[], rows: string[][], left = 1): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]): string => cells.map((c, i) => (i < left ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ");
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n");
}
