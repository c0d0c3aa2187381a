// Reads a `--record` file for `lostwrite replay`: the header first, then every
// record in file order. A file written by a crashed agent may end in half a
// line, and people edit recordings by hand, so a bad record is reported (line
// number, key, value), counted and skipped; only a missing or unusable header
// stops the replay, since nothing can be interpreted without it.
import { createReadStream } from "node:fs";
import { parseRecordLine, upgradeGoProbeLine, upgradeProbeLine, type DataRecord, type HeaderRecord } from "./format.ts";

export interface BadRecord {
  /** 1-based line number in the file. */
  line: number;
  message: string;
}

interface RecordReaderOptions {
  /** Told about each skipped record. */
  onBadRecord?: (bad: BadRecord) => void;
  /** Longest line accepted; longer ones are skipped unread. Default 64 MiB. */
  maxLineBytes?: number;
}

interface RecordReader {
  header: HeaderRecord;
  /** The records after the header, in file order. Can be iterated once. */
  records(): AsyncGenerator<DataRecord>;
  /** Records skipped so far. */
  readonly badRecords: number;
  /** Closes the file when records() is not read to the end. */
  close(): Promise<void>;
}

export async function openRecordReader(path: string, opts: RecordReaderOptions = {}): Promise<RecordReader> {
  const maxLineBytes = opts.maxLineBytes ?? 64 * 1024 * 1024;
  const lines = readLines(path, maxLineBytes);
  let badRecords = 0;
  const bad = (line: number, message: string): void => {
    badRecords++;
    opts.onBadRecord?.({ line, message });
  };

  const first = await nextLine(lines, path);
  if (first.tooLong) throw new Error(`${path}:1: not a lostwrite record file: the first line is over ${maxLineBytes} bytes`);
  const parsed = parseRecordLine(first.text);
  if (!parsed.ok) throw new Error(`${path}:1: not a usable lostwrite record file: ${parsed.error}`);
  if (parsed.record.kind !== "header") {
    throw new Error(`${path}:1: not a lostwrite record file: the first record must be the header, got kind "${parsed.record.kind}"`);
  }
  const header = parsed.record;

  let iterated = false;
  async function* records(): AsyncGenerator<DataRecord> {
    if (iterated) throw new Error("records() of a record file can be iterated only once");
    iterated = true;
    for await (const { number, text, tooLong } of lines) {
      if (tooLong) {
        bad(number, `line is over ${maxLineBytes} bytes`);
        continue;
      }
      if (text.trim() === "") continue;
      const result = parseRecordLine(text);
      if (!result.ok) bad(number, result.error);
      else if (result.record.kind === "header") bad(number, "a second header; the header belongs on line 1 only");
      else if (header.version === 1 && result.record.kind === "probe") yield { ...result.record, line: upgradeProbeLine(result.record.line) };
      else if (header.version < 5 && result.record.kind === "goProbe") yield { ...result.record, line: upgradeGoProbeLine(result.record.line, header.version) };
      else yield result.record;
    }
  }

  return {
    header,
    records,
    get badRecords() {
      return badRecords;
    },
    async close() {
      await lines.return(undefined);
    },
  };
}

interface Line {
  number: number;
  text: string;
  tooLong: boolean;
}

async function nextLine(lines: AsyncGenerator<Line>, path: string): Promise<Line> {
  try {
    const first = await lines.next();
    if (first.done === true) throw new Error(`${path}: empty file, not a lostwrite record file`);
    return first.value;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== undefined) {
      throw new Error(`${path}: cannot read the record file: ${(err as Error).message}`, { cause: err });
    }
    throw err;
  }
}

/** Lines of a file, without holding more than `maxLineBytes` of any one line. */
async function* readLines(path: string, maxLineBytes: number): AsyncGenerator<Line> {
  let number = 0;
  let parts: Buffer[] = [];
  let partsBytes = 0;
  let tooLong = false;
  for await (const chunk of createReadStream(path) as AsyncIterable<Buffer>) {
    let start = 0;
    for (let nl = chunk.indexOf(0x0a, start); nl !== -1; nl = chunk.indexOf(0x0a, start)) {
      const piece = chunk.subarray(start, nl);
      number++;
      if (tooLong || partsBytes + piece.length > maxLineBytes) yield { number, text: "", tooLong: true };
      else yield { number, text: Buffer.concat([...parts, piece]).toString("utf8"), tooLong: false };
      parts = [];
      partsBytes = 0;
      tooLong = false;
      start = nl + 1;
    }
    const rest = chunk.subarray(start);
    if (tooLong || partsBytes + rest.length > maxLineBytes) {
      tooLong = true;
      parts = [];
      partsBytes = 0;
    } else if (rest.length > 0) {
      parts.push(Buffer.from(rest));
      partsBytes += rest.length;
    }
  }
  if (tooLong || partsBytes > 0) {
    number++;
    yield { number, text: tooLong ? "" : Buffer.concat(parts).toString("utf8"), tooLong };
  }
}
