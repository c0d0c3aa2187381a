// Where the pclntab is. The Go linker names it .gopclntab (.data.rel.ro.gopclntab
// in PIE builds) and stripping with -s -w keeps section headers, but tools such
// as sstrip or some packers drop them. Then the table is found by its magic in
// the loaded segments: the runtime itself only ever reaches it through a
// pointer, so nothing else marks it. A candidate must pass the header checks and
// have a function table whose first and last addresses lie in executable code,
// which no stray copy of the magic in data will.
import type { ByteSource } from "./byteSource.ts";
import { findSection, type ElfImage, type LoadSegment } from "./elfImage.ts";
import { readU64 } from "./fileInteger.ts";
import { moduledataTextStart } from "./moduledata.ts";
import { NotInspectable } from "./notInspectable.ts";
import { PCLNTAB_HEADER_BYTES, parsePclntabHeader, pclntabLayoutAt, type PclntabHeader } from "./pclntabHeader.ts";

export interface PclntabLocation {
  /** File offset and virtual address of the header's first byte. */
  fileOffset: number;
  vaddr: number;
  /** Bytes from the header to the end of the table (or of its segment, when found by scanning). */
  size: number;
  header: PclntabHeader;
  /** The address Go 1.18+ function entries count from; null for the 1.16 layout, whose entries are absolute. */
  textStart: number | null;
  foundBy: "section" | "scan";
}

const SECTION_NAMES = [".gopclntab", ".data.rel.ro.gopclntab"];
/** Bytes 1–7 of every pclntab magic-plus-header on amd64: ff ff ff, two zero pads, quantum 1, pointer size 8. */
const HEADER_TAIL = Buffer.from([0xff, 0xff, 0xff, 0x00, 0x00, 0x01, 0x08]);
const SCAN_CHUNK_BYTES = 4 * 1024 * 1024;

export async function locatePclntab(source: ByteSource, image: ElfImage): Promise<PclntabLocation> {
  for (const name of SECTION_NAMES) {
    const section = findSection(image, name);
    if (section === undefined) continue;
    const bytes = await source.read(section.offset, Math.min(section.size, PCLNTAB_HEADER_BYTES), `${name} header`);
    const header = parsePclntabHeader(bytes, section.size);
    const textStart = await resolveTextStart(source, image, section.addr, header);
    if (textStart === undefined) throw new NotInspectable("the pclntab leaves its text start to the runtime, and neither a .text section nor the moduledata says it");
    return { fileOffset: section.offset, vaddr: section.addr, size: section.size, header, textStart, foundBy: "section" };
  }
  const found = await scanForPclntab(source, image);
  if (found === "go1.2") throw new NotInspectable("Go 1.2–1.15 pclntab: too old for the register ABI (Go 1.17+ on amd64)");
  if (found === undefined) {
    throw new NotInspectable(
      image.sections.length > 0 ? "not a Go binary: no .gopclntab section and no pclntab in its segments" : "not a Go binary: no pclntab found in its segments",
    );
  }
  return found;
}

/**
 * Scans the non-executable segments first: that is where every Go release
 * since 1.3 puts the table. "go1.2" when only a pre-1.16 table was seen: too
 * old to parse, but worth naming.
 */
async function scanForPclntab(source: ByteSource, image: ElfImage): Promise<PclntabLocation | "go1.2" | undefined> {
  const ordered = [...image.segments.filter((s) => !s.executable), ...image.segments.filter((s) => s.executable)];
  let sawOldTable = false;
  for (const segment of ordered) {
    const found = await scanSegment(source, image, segment);
    if (found === "go1.2") sawOldTable = true;
    else if (found !== undefined) return found;
  }
  return sawOldTable ? "go1.2" : undefined;
}

async function scanSegment(source: ByteSource, image: ElfImage, segment: LoadSegment): Promise<PclntabLocation | "go1.2" | undefined> {
  let sawOldTable = false;
  // Chunks overlap by a header's length so a header straddling two chunks is seen whole in the first.
  for (let start = 0; start < segment.filesz; start += SCAN_CHUNK_BYTES) {
    const length = Math.min(SCAN_CHUNK_BYTES + PCLNTAB_HEADER_BYTES, segment.filesz - start);
    const chunk = await source.read(segment.offset + start, length, "segment scan for pclntab");
    for (let hit = chunk.indexOf(HEADER_TAIL, 1); hit >= 0; hit = chunk.indexOf(HEADER_TAIL, hit + 1)) {
      const at = hit - 1;
      if (at >= SCAN_CHUNK_BYTES) break; // the next chunk sees it with its whole header
      const layout = pclntabLayoutAt(chunk, at);
      if (layout === undefined) continue;
      if (layout === "go1.2") {
        sawOldTable = true;
        continue;
      }
      const size = segment.filesz - (start + at);
      let header: PclntabHeader;
      try {
        header = parsePclntabHeader(chunk.subarray(at, at + PCLNTAB_HEADER_BYTES), size);
      } catch (error) {
        if (error instanceof NotInspectable) continue;
        throw error;
      }
      const vaddr = segment.vaddr + start + at;
      // A stray copy of the magic has no moduledata pointing at it.
      const textStart = await resolveTextStart(source, image, vaddr, header);
      if (textStart === undefined) continue;
      const location: PclntabLocation = { fileOffset: segment.offset + start + at, vaddr, size, header, textStart, foundBy: "scan" };
      if (await functionTableLooksReal(source, image, location)) return location;
    }
  }
  return sawOldTable ? "go1.2" : undefined;
}

/**
 * The address Go 1.18+ function entries count from: the header's, where it
 * holds one. Go 1.26 leaves it 0 always, and position-independent builds of
 * earlier releases leave it to a load-time relocation; then it is where .text
 * starts, as the linker defines runtime.text, or, without section headers,
 * what the runtime's moduledata says. Undefined when nothing says.
 */
async function resolveTextStart(source: ByteSource, image: ElfImage, pclntabVaddr: number, header: PclntabHeader): Promise<number | null | undefined> {
  if (header.textStart === null || header.textStart !== 0) return header.textStart;
  const text = findSection(image, ".text");
  if (text !== undefined) return text.addr;
  return moduledataTextStart(source, image, pclntabVaddr, header.funcnameOffset);
}

const inText = (image: ElfImage, vaddr: number): boolean => image.segments.some((s) => s.executable && vaddr >= s.vaddr && vaddr <= s.vaddr + s.memsz);

/** The first entry and the end sentinel of the function table must both be addresses in executable code, in order. */
async function functionTableLooksReal(source: ByteSource, image: ElfImage, location: PclntabLocation): Promise<boolean> {
  const { header, textStart } = location;
  const functab = location.fileOffset + header.pclnOffset;
  if (textStart === null) {
    const first = readU64(await source.read(functab, 8, "pclntab first entry"), 0, "entry");
    const end = readU64(await source.read(functab + header.nfunc * 16, 8, "pclntab end entry"), 0, "entry");
    return first < end && inText(image, first) && inText(image, end);
  }
  if (!inText(image, textStart)) return false;
  const first = (await source.read(functab, 4, "pclntab first entry")).readUInt32LE(0);
  const end = (await source.read(functab + header.nfunc * 8, 4, "pclntab end entry")).readUInt32LE(0);
  return first < end && inText(image, textStart + end);
}
