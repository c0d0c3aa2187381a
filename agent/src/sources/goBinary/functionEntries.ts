// Entry addresses of a few named functions, out of a pclntab with tens of
// thousands. Decoding every name would cost more time and memory than the
// whole rest of the inspection, so it goes the other way round: find the
// wanted names in funcnametab (one buffer search each), note their offsets,
// and then walk the function table comparing each _func's name offset — a
// 32-bit integer — against that small set.
//
// Function table entries are (entry, funcoff) pairs plus an end sentinel:
// two uint32 with entry relative to textStart since Go 1.18, two uintptr with
// an absolute entry in 1.16–1.17. funcoff locates the _func record from the
// table's start; its name offset (int32) follows the entry field, which is 4
// bytes since 1.18 and 8 bytes before.
import type { ByteSource } from "./byteSource.ts";
import { readU64 } from "./fileInteger.ts";
import { NotInspectable } from "./notInspectable.ts";
import type { PclntabLocation } from "./pclntabLocation.ts";

/** _func records are read through a window this size; they are laid out in table order, so each byte is read once. */
const RECORD_WINDOW_BYTES = 1024 * 1024;

/**
 * Maps each name in `wanted` that the binary defines to its entry address.
 * 1.18+ entries count from the location's text start; 1.16's are absolute.
 */
export async function findFunctionEntries(
  source: ByteSource,
  location: PclntabLocation,
  wanted: Iterable<string>,
): Promise<Map<string, number>> {
  const { header, textStart } = location;
  const names = await source.read(
    location.fileOffset + header.funcnameOffset,
    header.cuOffset - header.funcnameOffset,
    "pclntab function names",
  );
  const wantedByNameOffset = nameOffsets(names, wanted);
  const found = new Map<string, number>();
  if (wantedByNameOffset.size === 0) return found;

  const relative = textStart !== null;
  const field = relative ? 4 : 8;
  const tableStart = location.fileOffset + header.pclnOffset;
  const functab = await source.read(tableStart, (header.nfunc * 2 + 1) * field, "pclntab function table");
  const records = windowedReader(source, tableStart, location.size - header.pclnOffset);

  for (let i = 0; i < header.nfunc && found.size < wantedByNameOffset.size; i++) {
    const funcoff = relative ? functab.readUInt32LE((2 * i + 1) * 4) : readU64(functab, (2 * i + 1) * 8, "funcoff");
    const nameOffset = (await records(funcoff + field, 4)).readInt32LE(0);
    const name = wantedByNameOffset.get(nameOffset);
    if (name === undefined || found.has(name)) continue;
    const entry = relative ? textStart + functab.readUInt32LE(2 * i * 4) : readU64(functab, 2 * i * 8, "entry");
    found.set(name, entry);
  }
  return found;
}

/** Offsets in funcnametab of each wanted name, as a whole NUL-terminated string. */
function nameOffsets(names: Buffer, wanted: Iterable<string>): Map<number, string> {
  const offsets = new Map<number, string>();
  for (const name of wanted) {
    const needle = Buffer.from(`${name}\0`, "latin1");
    for (let at = names.indexOf(needle); at >= 0; at = names.indexOf(needle, at + 1)) {
      // A match after a non-NUL byte is the tail of a longer name, as
      // "http2.(*T).f" is the tail of "golang.org/x/net/http2.(*T).f".
      if (at === 0 || names[at - 1] === 0) offsets.set(at, name);
    }
  }
  return offsets;
}

/** Reads `length` bytes at `offset` within a region of `regionSize` bytes starting at file offset `regionStart`, via a forward-moving window. */
function windowedReader(source: ByteSource, regionStart: number, regionSize: number): (offset: number, length: number) => Promise<Buffer> {
  let windowStart = 0;
  let window: Buffer = Buffer.alloc(0);
  return async (offset, length) => {
    if (offset < 0 || offset + length > regionSize) {
      throw new NotInspectable(`pclntab _func record at ${offset} lies outside the table`);
    }
    if (offset < windowStart || offset + length > windowStart + window.length) {
      windowStart = offset;
      window = await source.read(regionStart + offset, Math.min(Math.max(RECORD_WINDOW_BYTES, length), regionSize - offset), "pclntab _func records");
    }
    return window.subarray(offset - windowStart, offset - windowStart + length);
  };
}
