// Where a Go binary's text starts, from runtime.firstmoduledata. Go 1.18+
// function entries in the pclntab count from runtime.text. The table's header
// carried that address until Go 1.26, which stopped filling it in (always 0,
// as position-independent builds of earlier releases left it for a load-time
// relocation). With section headers the start of .text says it; without them,
// the moduledata does: the runtime's own record of the module, in the data
// segment, whose first word points at the pclntab header and whose `text`
// field is the address wanted. The linker writes those words into the file
// also for PIE builds (which relocate them again at load).
//
// moduledata starts (unchanged from Go 1.16 through 1.26):
//   pcHeader *pcHeader      +0
//   funcnametab []byte      +8   (pointer, len, cap)
//   cutab, filetab, pctab, pclntable, ftab: five more slices
//   findfunctab uintptr     +152
//   minpc, maxpc uintptr    +160, +168
//   text, etext uintptr     +176, +184
import type { ByteSource } from "./byteSource.ts";
import type { ElfImage } from "./elfImage.ts";
import { readU64 } from "./fileInteger.ts";

const FUNCNAMETAB_FIELD = 8;
const TEXT_FIELD = 176;
const MODULEDATA_PREFIX_BYTES = TEXT_FIELD + 8;
const SCAN_CHUNK_BYTES = 4 * 1024 * 1024;

/**
 * runtime.text of the module whose pclntab header is at `pclntabVaddr`, or
 * undefined when no moduledata in the file's data points at that header (and
 * at its function names right after) with a text address in executable code.
 */
export async function moduledataTextStart(source: ByteSource, image: ElfImage, pclntabVaddr: number, funcnameOffset: number): Promise<number | undefined> {
  const pointer = Buffer.alloc(8);
  pointer.writeBigUInt64LE(BigInt(pclntabVaddr));
  const inText = (vaddr: number): boolean => image.segments.some((s) => s.executable && vaddr >= s.vaddr && vaddr < s.vaddr + s.memsz);
  // The runtime keeps it in .noptrdata: writable, not executable.
  for (const segment of image.segments.filter((s) => s.writable && !s.executable)) {
    for (let start = 0; start < segment.filesz; start += SCAN_CHUNK_BYTES) {
      const length = Math.min(SCAN_CHUNK_BYTES + MODULEDATA_PREFIX_BYTES, segment.filesz - start);
      const chunk = await source.read(segment.offset + start, length, "data segment scan for the Go moduledata");
      // The pointer is 8-byte aligned in an 8-byte aligned struct, and segments start page-aligned.
      for (let at = chunk.indexOf(pointer); at >= 0; at = chunk.indexOf(pointer, at + 1)) {
        if (at % 8 !== 0 || at >= SCAN_CHUNK_BYTES || at + MODULEDATA_PREFIX_BYTES > chunk.length) continue;
        if (readU64(chunk, at + FUNCNAMETAB_FIELD, "moduledata funcnametab") !== pclntabVaddr + funcnameOffset) continue;
        const text = readU64(chunk, at + TEXT_FIELD, "moduledata text");
        if (inText(text)) return text;
      }
    }
  }
  return undefined;
}
