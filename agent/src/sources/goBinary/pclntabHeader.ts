// Go's runtime symbol table, pclntab, survives `-ldflags=-s -w` because the
// runtime itself needs it for stack traces and garbage collection; it is what
// lets a stripped operator binary still be probed by function. Its header
// (runtime.pcHeader) has changed shape across releases, told apart by the magic:
//
//   0xfffffffb  Go 1.2–1.15   one flat table; too old to matter here (stack ABI)
//   0xfffffffa  Go 1.16–1.17  pcHeader with nfunc, nfiles, then five offsets
//   0xfffffff0  Go 1.18–1.19  as 1.16 plus textStart; entries relative to it
//   0xfffffff1  Go 1.20+      same header as 1.18 (the change was elsewhere)
//
// after the magic: two zero bytes, the instruction size quantum (1 on amd64)
// and the pointer size (8). Then pointer-sized words: nfunc, nfiles,
// [textStart,] and the offsets, from the header's start, of funcnametab, cutab,
// filetab, pctab and pclntab (the function table and the _func records).
import { readU64 } from "./fileInteger.ts";
import { NotInspectable } from "./notInspectable.ts";

export type PclntabLayout = "go1.2" | "go1.16" | "go1.18" | "go1.20";

const PCLNTAB_MAGIC: Record<number, PclntabLayout> = {
  0xfffffffb: "go1.2",
  0xfffffffa: "go1.16",
  0xfffffff0: "go1.18",
  0xfffffff1: "go1.20",
};

/** Magic, pad, quantum and pointer size, then at most eight pointer-sized words. */
export const PCLNTAB_HEADER_BYTES = 8 + 8 * 8;

/** More functions than this is a corrupt count: kubectl has about 70 000. */
const MAX_FUNCTIONS = 20_000_000;

export interface PclntabHeader {
  layout: Exclude<PclntabLayout, "go1.2">;
  /** Number of entries in the function table. */
  nfunc: number;
  /**
   * Go 1.18+: the address function entries are relative to (runtime.text).
   * It can be 0 in the file when a dynamic relocation fills it at load time.
   * null for the 1.16 layout, whose entries are absolute addresses.
   */
  textStart: number | null;
  /** Offsets from the header's first byte. funcnametab ends where cutab begins. */
  funcnameOffset: number;
  cuOffset: number;
  pclnOffset: number;
}

/** The layout named by the 4-byte magic at `at`, or undefined when it is no pclntab magic. */
export function pclntabLayoutAt(bytes: Buffer, at: number): PclntabLayout | undefined {
  if (at + 4 > bytes.length) return undefined;
  return PCLNTAB_MAGIC[bytes.readUInt32LE(at)];
}

/**
 * Parses the header in `bytes` (at least PCLNTAB_HEADER_BYTES, or the whole
 * table when shorter) of a table `tableSize` bytes long. The checks are the
 * ones that make a random match of the magic in a data scan fail, and that keep
 * later reads inside the table.
 */
export function parsePclntabHeader(bytes: Buffer, tableSize: number): PclntabHeader {
  if (bytes.length < 8) throw new NotInspectable("pclntab is shorter than its header");
  const layout = pclntabLayoutAt(bytes, 0);
  if (layout === undefined) throw new NotInspectable(`no pclntab magic (found 0x${bytes.readUInt32LE(0).toString(16)})`);
  if (layout === "go1.2") throw new NotInspectable("Go 1.2–1.15 pclntab: too old for the register ABI (Go 1.17+ on amd64)");
  if (bytes[4] !== 0 || bytes[5] !== 0) throw new NotInspectable("pclntab header padding is not zero");
  if (bytes[6] !== 1) throw new NotInspectable(`pclntab instruction quantum ${bytes[6]} is not amd64's 1`);
  if (bytes[7] !== 8) throw new NotInspectable(`pclntab pointer size ${bytes[7]} is not 8`);
  const hasTextStart = layout !== "go1.16";
  const words = hasTextStart ? 8 : 7;
  if (bytes.length < 8 + words * 8) throw new NotInspectable("truncated pclntab header");
  const word = (i: number, what: string): number => readU64(bytes, 8 + i * 8, `pclntab ${what}`);

  const nfunc = word(0, "nfunc");
  const textStart = hasTextStart ? word(2, "textStart") : null;
  const first = hasTextStart ? 3 : 2;
  const funcnameOffset = word(first, "funcnameOffset");
  const cuOffset = word(first + 1, "cuOffset");
  const filetabOffset = word(first + 2, "filetabOffset");
  const pctabOffset = word(first + 3, "pctabOffset");
  const pclnOffset = word(first + 4, "pclnOffset");

  if (nfunc === 0 || nfunc > MAX_FUNCTIONS) throw new NotInspectable(`pclntab claims ${nfunc} functions`);
  const headerEnd = 8 + words * 8;
  const ordered = [headerEnd, funcnameOffset, cuOffset, filetabOffset, pctabOffset, pclnOffset];
  for (let i = 1; i < ordered.length; i++) {
    if (ordered[i]! < ordered[i - 1]!) throw new NotInspectable("pclntab header offsets are out of order");
  }
  if (cuOffset === funcnameOffset) throw new NotInspectable("pclntab has an empty function name table");
  const functabBytes = (nfunc * 2 + 1) * (hasTextStart ? 4 : 8);
  if (pclnOffset + functabBytes > tableSize) {
    throw new NotInspectable(`pclntab function table (${nfunc} functions) runs past the table's ${tableSize} bytes`);
  }
  return { layout, nfunc, textStart, funcnameOffset, cuOffset, pclnOffset };
}
