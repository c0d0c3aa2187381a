// The Go toolchain version and module list a binary was built with, from the
// build info blob the linker writes at the start of the data (the .go.buildinfo
// section, or the first writable segment when sections are gone). The version
// decides the calling convention the probes must read (the register ABI came
// with Go 1.17 on amd64) and the module list says which golang.org/x/net an
// operator ships, which is what decides the x/net HTTP/2 code the probes hook.
//
// The blob is 32 bytes: the magic "\xff Go buildinf:", pointer size, a flags
// byte, then two pointers. Since Go 1.18 flag bit 2 means the pointers are
// unused and two uvarint-length-prefixed strings (version, module info) follow
// the header; before, the pointers lead to Go string headers (data, length).
// The module info is framed by 16-byte sentinels, and is a list of
// tab-separated lines: "path", "mod", "dep" and "=>" (replaces the line before).
import type { ByteSource } from "./byteSource.ts";
import { findSection, type ElfImage } from "./elfImage.ts";
import { fileOffsetOf, segmentContaining } from "./fileOffset.ts";
import { readU64 } from "./fileInteger.ts";
import { NotInspectable } from "./notInspectable.ts";

export interface ModuleVersion {
  path: string;
  /** "v0.30.0", or "(devel)" for a module built from a directory. */
  version: string;
  /** Set when go.mod replaced the module ("=>" line); the replacement is what was compiled. */
  replacement: { path: string; version: string } | null;
}

interface BuildInfo {
  /** As the toolchain wrote it: "go1.23.8", "go1.21rc2", "devel go1.24-abc123 …". */
  goVersion: string;
  /** The main module and every dependency, by module path; empty when built without modules. */
  modules: Map<string, ModuleVersion>;
}

const MAGIC = Buffer.from("\xff Go buildinf:", "latin1");
const HEADER_BYTES = 32;
const ALIGN = 16;
/** The linker places the blob first in its segment; Go's own reader looks no further than this either. */
const SEARCH_BYTES = 64 * 1024;
/** Module lists of the largest operators are tens of kilobytes; more is corrupt. */
const MAX_STRING_BYTES = 16 * 1024 * 1024;
const FLAG_BIG_ENDIAN = 1;
const FLAG_INLINE_STRINGS = 2;
const SENTINEL_BYTES = 16;

/** The binary's build info, or null when it has none (not Go, or a linker that predates it). */
export async function readBuildInfo(source: ByteSource, image: ElfImage): Promise<BuildInfo | null> {
  const header = await findHeader(source, image);
  if (header === null) return null;
  const bytes = await source.read(header.fileOffset, HEADER_BYTES, "build info header");
  const ptrSize = bytes[14];
  const flags = bytes[15] ?? 0;
  if (ptrSize !== 8) throw new NotInspectable(`build info pointer size ${ptrSize} is not 8`);
  if ((flags & FLAG_BIG_ENDIAN) !== 0) throw new NotInspectable("build info is big-endian");

  let version: Buffer;
  let modinfo: Buffer;
  if ((flags & FLAG_INLINE_STRINGS) !== 0) {
    const first = await inlineString(source, header.fileOffset + HEADER_BYTES, header.end);
    const second = await inlineString(source, first.end, header.end);
    version = first.bytes;
    modinfo = second.bytes;
  } else {
    version = await pointedString(source, image, readU64(bytes, 16, "build info version pointer"));
    modinfo = await pointedString(source, image, readU64(bytes, 24, "build info modinfo pointer"));
  }
  if (version.length === 0) return null;
  return { goVersion: version.toString("utf8"), modules: parseModules(unframe(modinfo)) };
}

/**
 * The section when there is one; else the start of each writable segment. A
 * PIE build puts its relocated read-only data (.data.rel.ro) in a writable
 * segment before the one holding the build info, so the first is not enough.
 */
async function findHeader(source: ByteSource, image: ElfImage): Promise<{ fileOffset: number; end: number } | null> {
  const section = findSection(image, ".go.buildinfo");
  const areas = section
    ? [section]
    : image.segments.filter((s) => s.writable && !s.executable && s.filesz > 0).map((s) => ({ offset: s.offset, size: s.filesz }));
  for (const area of areas) {
    const data = await source.read(area.offset, Math.min(area.size, SEARCH_BYTES), "build info search");
    for (let at = data.indexOf(MAGIC); at >= 0; at = data.indexOf(MAGIC, at + 1)) {
      if (at % ALIGN === 0 && at + HEADER_BYTES <= data.length) return { fileOffset: area.offset + at, end: area.offset + area.size };
    }
  }
  return null;
}

/** A uvarint length and that many bytes at `offset`, not reaching past `end`. */
async function inlineString(source: ByteSource, offset: number, end: number): Promise<{ bytes: Buffer; end: number }> {
  const prefix = await source.read(offset, Math.min(10, end - offset), "build info string length");
  let length = 0;
  let scale = 1;
  let used = 0;
  for (;;) {
    const byte = prefix[used];
    if (byte === undefined) throw new NotInspectable("build info string length is cut off");
    used++;
    length += (byte & 0x7f) * scale;
    if ((byte & 0x80) === 0) break;
    scale *= 128;
  }
  if (length > MAX_STRING_BYTES || offset + used + length > end) throw new NotInspectable(`build info string of ${length} bytes does not fit`);
  const bytes = await source.read(offset + used, length, "build info string");
  return { bytes, end: offset + used + length };
}

/** The Go string whose header (data pointer, length) is at `vaddr`; empty when the pointer leads nowhere, as Go's own reader treats it. */
async function pointedString(source: ByteSource, image: ElfImage, vaddr: number): Promise<Buffer> {
  const headerAt = fileOffsetOf(image, vaddr);
  if (headerAt === undefined || segmentContaining(image, vaddr + 15) === undefined) return Buffer.alloc(0);
  const header = await source.read(headerAt, 16, "build info string header");
  const data = readU64(header, 0, "build info string pointer");
  const length = readU64(header, 8, "build info string length");
  if (length === 0) return Buffer.alloc(0);
  const dataAt = fileOffsetOf(image, data);
  if (dataAt === undefined || length > MAX_STRING_BYTES || segmentContaining(image, data + length - 1) === undefined) return Buffer.alloc(0);
  return source.read(dataAt, length, "build info string");
}

/** Strips the binary sentinels cmd/go wraps module info in; bytes without them are not module info. */
function unframe(bytes: Buffer): string {
  if (bytes.length <= 2 * SENTINEL_BYTES || bytes[bytes.length - SENTINEL_BYTES - 1] !== 0x0a) return "";
  return bytes.toString("utf8", SENTINEL_BYTES, bytes.length - SENTINEL_BYTES);
}

function parseModules(text: string): Map<string, ModuleVersion> {
  const modules = new Map<string, ModuleVersion>();
  let last: ModuleVersion | undefined;
  for (const line of text.split("\n")) {
    const [kind, path, version] = line.split("\t");
    if (path === undefined || path === "") continue;
    if (kind === "mod" || kind === "dep") {
      last = { path, version: version ?? "", replacement: null };
      modules.set(path, last);
    } else if (kind === "=>" && last !== undefined) {
      last.replacement = { path, version: version ?? "" };
    }
  }
  return modules;
}
