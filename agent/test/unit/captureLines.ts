// A stream that keeps what is written to it, for tests of the writers of JSON
// lines (the agent's log, the loss event log).
import { PassThrough } from "node:stream";

export function captureLines(): { out: PassThrough; lines: () => Record<string, unknown>[]; raw: () => string } {
  const out = new PassThrough();
  const chunks: string[] = [];
  out.on("data", (chunk: Buffer) => chunks.push(chunk.toString("utf8")));
  return {
    out,
    lines: () =>
      chunks
        .join("")
        .split("\n")
        .filter((l) => l !== "")
        .map((l) => JSON.parse(l) as Record<string, unknown>),
    raw: () => chunks.join(""),
  };
}
