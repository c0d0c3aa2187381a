// The benchmark's numbers: one sample per (operation, configuration, round)
// on each clock, summarised against the baseline configuration of the same
// round. Pairing by round matters on a shared machine: the load drifts
// between rounds far more than within one.

export function median(values: number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

interface Column {
  key: string;
  label: string;
}

/** ns per operation on each clock; wall is null where only CPU time means anything (a reader that blocks). */
export interface Sample {
  wallNs: number | null;
  cpuNs: number;
}

type Clock = "wallNs" | "cpuNs";

export class CostTable {
  readonly #samples = new Map<string, Map<number, Sample>>();
  readonly #operations: Column[];
  readonly #configurations: Column[];
  readonly #baseline: string;

  constructor(operations: Column[], configurations: Column[], baseline: string) {
    this.#operations = operations;
    this.#configurations = configurations;
    this.#baseline = baseline;
  }

  record(operation: string, configuration: string, round: number, sample: Sample): void {
    const key = `${operation}\u0000${configuration}`;
    let byRound = this.#samples.get(key);
    if (!byRound) this.#samples.set(key, (byRound = new Map<number, Sample>()));
    byRound.set(round, sample);
  }

  #rounds(operation: string, configuration: string): Map<number, Sample> {
    return this.#samples.get(`${operation}\u0000${configuration}`) ?? new Map<number, Sample>();
  }

  /** Median, added ns and ratio of one clock; added and ratio are medians of per-round pairs with the baseline. */
  #summary(operation: string, configuration: string, clock: Clock, rounds: Set<number>): { median: string; range: string; added: string; ratio: string } {
    const base = this.#rounds(operation, this.#baseline);
    const values: number[] = [];
    const diffs: number[] = [];
    const ratios: number[] = [];
    for (const [round, sample] of this.#rounds(operation, configuration)) {
      if (!rounds.has(round)) continue;
      const value = sample[clock];
      if (value === null) continue;
      values.push(value);
      const b = base.get(round)?.[clock];
      if (b === undefined || b === null) continue;
      diffs.push(value - b);
      ratios.push(value / b);
    }
    if (values.length === 0) return { median: "—", range: "—", added: "—", ratio: "—" };
    const isBase = configuration === this.#baseline;
    return {
      median: median(values).toFixed(0),
      range: `${Math.min(...values).toFixed(0)}–${Math.max(...values).toFixed(0)}`,
      added: isBase ? "—" : signed(median(diffs)),
      ratio: isBase ? "1.00" : median(ratios).toFixed(2),
    };
  }

  /** One line per operation × configuration, wall clock then CPU clock, from the given rounds. */
  render(rounds: Set<number>): string {
    const header = ["operation", "configuration", "wall ns/op", "min–max", "added", "ratio", "CPU ns/op", "min–max", "added", "ratio"];
    const rows: string[][] = [];
    for (const op of this.#operations) {
      for (const config of this.#configurations) {
        if (this.#rounds(op.key, config.key).size === 0) continue;
        const wall = this.#summary(op.key, config.key, "wallNs", rounds);
        const cpu = this.#summary(op.key, config.key, "cpuNs", rounds);
        rows.push([op.label, config.label, wall.median, wall.range, wall.added, wall.ratio, cpu.median, cpu.range, cpu.added, cpu.ratio]);
      }
    }
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    const line = (cells: string[]): string => cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ").trimEnd();
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
