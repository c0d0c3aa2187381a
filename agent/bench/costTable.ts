// The benchmark's numbers: one ns/op sample per (operation, configuration,
// round), summarised against the baseline configuration of the same round.
// Pairing by round matters on a shared machine: the load drifts between
// rounds far more than it does within one.

export function median(values: number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export interface Column {
  key: string;
  label: string;
}

export class CostTable {
  readonly #samples = new Map<string, Map<number, number>>();
  readonly #operations: Column[];
  readonly #configurations: Column[];
  readonly #baseline: string;

  constructor(operations: Column[], configurations: Column[], baseline: string) {
    this.#operations = operations;
    this.#configurations = configurations;
    this.#baseline = baseline;
  }

  record(operation: string, configuration: string, round: number, nsPerOp: number): void {
    const key = `${operation}\u0000${configuration}`;
    let byRound = this.#samples.get(key);
    if (!byRound) this.#samples.set(key, (byRound = new Map<number, number>()));
    byRound.set(round, nsPerOp);
  }

  #rounds(operation: string, configuration: string): Map<number, number> {
    return this.#samples.get(`${operation}\u0000${configuration}`) ?? new Map<number, number>();
  }

  /** One line per operation × configuration: median, range, added ns and ratio against the baseline. */
  render(): string {
    const header = ["operation", "configuration", "median ns/op", "min–max", "added ns", "ratio"];
    const rows: string[][] = [];
    for (const op of this.#operations) {
      const base = this.#rounds(op.key, this.#baseline);
      for (const config of this.#configurations) {
        const samples = this.#rounds(op.key, config.key);
        const values = [...samples.values()];
        if (values.length === 0) continue;
        // Added ns and ratio are medians of per-round differences: each round's
        // sample against the baseline measured in that same round.
        const diffs: number[] = [];
        const ratios: number[] = [];
        for (const [round, value] of samples) {
          const b = base.get(round);
          if (b === undefined) continue;
          diffs.push(value - b);
          ratios.push(value / b);
        }
        const isBase = config.key === this.#baseline;
        rows.push([
          op.label,
          config.label,
          median(values).toFixed(0),
          `${Math.min(...values).toFixed(0)}–${Math.max(...values).toFixed(0)}`,
          isBase ? "—" : signed(median(diffs)),
          isBase ? "1.00" : median(ratios).toFixed(2),
        ]);
      }
    }
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    const numeric = new Set([2, 3, 4, 5]);
    const line = (cells: string[]): string =>
      cells.map((c, i) => (numeric.has(i) ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join("  ").trimEnd();
    const out = [line(header), widths.map((w) => "-".repeat(w)).join("  ")];
    let previous = "";
    for (const row of rows) {
      if (previous && row[0] !== previous) out.push("");
      previous = row[0]!;
      out.push(line(row));
    }
    return out.join("\n");
  }
}

function signed(n: number): string {
  if (!Number.isFinite(n)) return "?";
  const rounded = Math.round(n);
  return rounded > 0 ? `+${rounded}` : String(rounded);
}
