// A uprobe is placed by file offset, not by virtual address: the kernel
// attaches to an inode and an offset within it, and bpftrace 0.17 passes
// `uprobe:/path:0xOFF` through as that offset when run with --unsafe (checked
// on a live client: the offset fires on the function; its vaddr given instead
// is refused by perf_event_open). Go binaries load with p_offset != p_vaddr (0x400000 base for executables, and
// later segments are not contiguous in the file), so the offset must come from
// the PT_LOAD segment that contains the address.
import type { ElfImage, LoadSegment } from "./elfImage.ts";

/** The segment holding `vaddr` in its file-backed part, or undefined. */
export function segmentContaining(image: ElfImage, vaddr: number): LoadSegment | undefined {
  return image.segments.find((s) => vaddr >= s.vaddr && vaddr < s.vaddr + s.filesz);
}

/** File offset of `vaddr`, or undefined when no PT_LOAD segment maps it from the file. */
export function fileOffsetOf(image: ElfImage, vaddr: number): number | undefined {
  const segment = segmentContaining(image, vaddr);
  return segment === undefined ? undefined : vaddr - segment.vaddr + segment.offset;
}
