// What the demo prints. Lines scroll as things happen (steps, injections,
// detections, formatted like `lostwrite tail`); on a terminal a footer below
// them keeps the script's progress and a running table by cause, redrawn in
// place. Off a terminal (a pipe, a test) there is no footer and no colour,
// only the lines.
import { LOSS_CAUSES } from "../vocabulary/causes.ts";
import { styleText } from "node:util";
import type { FaultRecord } from "../../../testbed/apiserver/faults.ts";
import type { LossCause, LossEvent } from "../model.ts";
import { formatEventLine } from "../tail.ts";

type Format = Parameters<typeof styleText>[0];

const CAUSE_WIDTH = "connection_closed_unanswered".length;

export class Screen {
  readonly color: boolean;
  private readonly out: NodeJS.WritableStream;
  private readonly live: boolean;
  private footerLines = 0;
  private steps = { done: 0, total: 0 };
  private readonly expected = new Map<LossCause, number>();
  private readonly detected = new Map<LossCause, { silent: number; noticed: number; unknown: number }>();
  private startMs = Date.now();
  private ticker: NodeJS.Timeout | undefined;

  constructor(out: NodeJS.WritableStream, opts: { color: boolean; live: boolean }) {
    this.out = out;
    this.color = opts.color;
    this.live = opts.live;
  }

  style(format: Format, text: string): string {
    return this.color ? styleText(format, text, { validateStream: false }) : text;
  }

  /** Prints lines above the footer. */
  line(text = ""): void {
    this.eraseFooter();
    this.out.write(text + "\n");
    this.drawFooter();
  }

  startScript(total: number): void {
    this.steps = { done: 0, total };
    this.startMs = Date.now();
    this.drawFooter();
    if (this.live) {
      // Keeps the elapsed time moving while nothing else happens.
      this.ticker = setInterval(() => {
        this.eraseFooter();
        this.drawFooter();
      }, 500);
      this.ticker.unref();
    }
  }

  stepStarted(index: number, id: string, action: string, target: string): void {
    this.line(`${this.style("bold", `[${String(index + 1).padStart(2)}/${this.steps.total}]`)} ${id.padEnd(18)} ${action.padEnd(7)} ${target}`);
  }

  stepDone(): void {
    this.steps.done += 1;
    this.eraseFooter();
    this.drawFooter();
  }

  injected(record: FaultRecord): void {
    const expect = record.expect?.cause !== undefined ? `expect ${record.expect.cause}` : "expect no loss";
    this.line(`        ${this.style("dim", "injected")} ${record.detail}  ${this.style("dim", `(${expect})`)}`);
    if (record.expect?.cause !== undefined) this.expected.set(record.expect.cause, (this.expected.get(record.expect.cause) ?? 0) + 1);
  }

  detection(event: LossEvent): void {
    const counts = this.detected.get(event.cause) ?? { silent: 0, noticed: 0, unknown: 0 };
    if (event.noticed === "no") counts.silent += 1;
    else if (event.noticed === "yes") counts.noticed += 1;
    else counts.unknown += 1;
    this.detected.set(event.cause, counts);
    this.line(`   ${this.style("bold", "▶ detected")} ${formatEventLine(event, this.color)}`);
  }

  /** The table by cause, also printed once at the end when there is no footer. */
  causeTable(): string[] {
    const header = `${"cause".padEnd(CAUSE_WIDTH)}  detected  silent  noticed`;
    const rows = LOSS_CAUSES.map((cause) => {
      const c = this.detected.get(cause) ?? { silent: 0, noticed: 0, unknown: 0 };
      const total = c.silent + c.noticed + c.unknown;
      const row = `${cause.padEnd(CAUSE_WIDTH)}  ${String(total).padStart(8)}  ${String(c.silent).padStart(6)}  ${String(c.noticed).padStart(7)}`;
      return total === 0 ? this.style("dim", row) : c.silent > 0 ? this.style("red", row) : row;
    });
    return [this.style("underline", header), ...rows];
  }

  /** Removes the footer for good (before the summary). */
  finish(): void {
    clearInterval(this.ticker);
    this.eraseFooter();
    this.steps.total = 0;
  }

  private footer(): string[] {
    if (!this.live || this.steps.total === 0) return [];
    const width = 24;
    const filled = Math.round((this.steps.done / this.steps.total) * width);
    const bar = this.style("green", "█".repeat(filled)) + this.style("dim", "░".repeat(width - filled));
    const seconds = ((Date.now() - this.startMs) / 1000).toFixed(1);
    return ["", `script ${bar} ${this.steps.done}/${this.steps.total} steps  ${seconds} s`, ...this.causeTable().map((row) => `  ${row}`)];
  }

  private drawFooter(): void {
    const lines = this.footer();
    if (lines.length === 0) return;
    this.out.write(lines.join("\n") + "\n");
    this.footerLines = lines.length;
  }

  private eraseFooter(): void {
    if (this.footerLines === 0) return;
    // Cursor up to the footer's first line, then clear to the end of the screen.
    this.out.write(`\x1b[${this.footerLines}F\x1b[J`);
    this.footerLines = 0;
  }
}
