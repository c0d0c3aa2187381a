// The parts of an ELF file needed to find Go's tables and to turn a function's
// virtual address into the file offset a uprobe takes: the header, the PT_LOAD
// segments and, when the linker kept them, the section headers. Only 64-bit
// little-endian x86-64 is accepted, because the request-level probes read
// arguments from the amd64 register ABI; anything else is NotInspectable with
// the reason, read from the header, so the agent can say why it fell back.
import type { ByteSource } from "./byteSource.ts";
import { readU64 } from "./fileInteger.ts";
import { NotInspectable } from "./notInspectable.ts";

export interface LoadSegment {
  vaddr: number;
  /** Offset of the segment's first byte in the file. */
  offset: number;
  /** Bytes present in the file; memsz beyond it is zero-filled (.bss) and has no file offset. */
  filesz: number;
  memsz: number;
  readable: boolean;
  writable: boolean;
  executable: boolean;
}

export interface Section {
  name: string;
  /** sh_type; SHT_NOBITS (8) sections occupy no file bytes. */
  type: number;
  /** sh_flags; SHF_COMPRESSED (0x800): the bytes are a compression header and a zlib stream (Go's DWARF). */
  flags: number;
  addr: number;
  offset: number;
  size: number;
}

export interface ElfImage {
  /** e_type: 2 for a fixed-address executable, 3 for PIE and shared objects. */
  type: number;
  segments: LoadSegment[];
  /** Empty when the file has no section headers (some strip tools drop them). */
  sections: Section[];
}

const ELF_MAGIC = Buffer.from([0x7f, 0x45, 0x4c, 0x46]);
const ELFCLASS64 = 2;
const ELFDATA2LSB = 1;
const EM_X86_64 = 62;
const PT_LOAD = 1;
const PF_X = 1;
const PF_W = 2;
const PF_R = 4;
const SHT_NOBITS = 8;
const PN_XNUM = 0xffff;
const SHN_XINDEX = 0xffff;
const EHDR_SIZE = 64;
const PHDR_SIZE = 56;
const SHDR_SIZE = 64;
/** Far more than any linker emits; a larger count is a corrupt header, not a reason to allocate. */
const MAX_HEADERS = 4096;
/** Section names are short; a larger string table is corrupt. */
const MAX_SHSTRTAB_BYTES = 1024 * 1024;

const MACHINE_NAMES: Record<number, string> = {
  3: "x86 (386)",
  8: "MIPS",
  20: "PowerPC",
  21: "PowerPC64",
  22: "s390x",
  40: "ARM",
  183: "arm64",
  243: "RISC-V",
  258: "LoongArch",
};

/** Reads and checks the ELF header, program headers and section headers of `source`. */
export async function readElfImage(source: ByteSource): Promise<ElfImage> {
  if (source.size < EHDR_SIZE) throw new NotInspectable(`not an ELF file: ${source.size} bytes is shorter than an ELF header`);
  const header = await source.read(0, EHDR_SIZE, "ELF header");
  if (!header.subarray(0, 4).equals(ELF_MAGIC)) throw new NotInspectable("not an ELF file (no \\x7fELF magic)");
  if (header[4] !== ELFCLASS64) {
    throw new NotInspectable(header[4] === 1 ? "32-bit ELF: only 64-bit amd64 binaries are supported" : `unknown ELF class ${header[4]}`);
  }
  if (header[5] !== ELFDATA2LSB) {
    throw new NotInspectable(header[5] === 2 ? "big-endian ELF: only little-endian amd64 binaries are supported" : `unknown ELF data encoding ${header[5]}`);
  }
  const machine = header.readUInt16LE(18);
  if (machine !== EM_X86_64) {
    const name = MACHINE_NAMES[machine] ?? `e_machine ${machine}`;
    throw new NotInspectable(`${name} binary: only amd64 is supported, the probes read the amd64 register ABI`);
  }
  const type = header.readUInt16LE(16);
  const phoff = readU64(header, 32, "e_phoff");
  const shoff = readU64(header, 40, "e_shoff");
  const phentsize = header.readUInt16LE(54);
  const phnum = header.readUInt16LE(56);
  const shentsize = header.readUInt16LE(58);
  const shnum = header.readUInt16LE(60);
  const shstrndx = header.readUInt16LE(62);

  const segments = await readLoadSegments(source, phoff, phentsize, phnum);
  const sections = shoff === 0 ? [] : await readSections(source, shoff, shentsize, shnum, shstrndx);
  return { type, segments, sections };
}

async function readLoadSegments(source: ByteSource, phoff: number, phentsize: number, phnum: number): Promise<LoadSegment[]> {
  if (phnum === 0) throw new NotInspectable("ELF file has no program headers: not an executable");
  if (phnum === PN_XNUM) throw new NotInspectable("ELF file uses extended program header numbering, which Go never emits");
  if (phentsize < PHDR_SIZE) throw new NotInspectable(`ELF program header size ${phentsize} is smaller than ${PHDR_SIZE}`);
  const table = await source.read(phoff, phentsize * phnum, "ELF program headers");
  const segments: LoadSegment[] = [];
  for (let i = 0; i < phnum; i++) {
    const at = i * phentsize;
    if (table.readUInt32LE(at) !== PT_LOAD) continue;
    const flags = table.readUInt32LE(at + 4);
    const segment: LoadSegment = {
      offset: readU64(table, at + 8, "p_offset"),
      vaddr: readU64(table, at + 16, "p_vaddr"),
      filesz: readU64(table, at + 32, "p_filesz"),
      memsz: readU64(table, at + 40, "p_memsz"),
      readable: (flags & PF_R) !== 0,
      writable: (flags & PF_W) !== 0,
      executable: (flags & PF_X) !== 0,
    };
    // A segment whose bytes run past the end of the file is the clearest sign
    // of a truncated copy; catching it here names the problem precisely.
    if (segment.offset + segment.filesz > source.size) {
      throw new NotInspectable(
        `truncated file: a PT_LOAD segment needs bytes up to ${segment.offset + segment.filesz} but the file has ${source.size}`,
      );
    }
    segments.push(segment);
  }
  if (segments.length === 0) throw new NotInspectable("ELF file has no PT_LOAD segments: nothing is loaded from it");
  return segments;
}

async function readSections(source: ByteSource, shoff: number, shentsize: number, shnum: number, shstrndx: number): Promise<Section[]> {
  if (shentsize < SHDR_SIZE) throw new NotInspectable(`ELF section header size ${shentsize} is smaller than ${SHDR_SIZE}`);
  // With more than 0xff00 sections the real count and string table index
  // live in section 0; read it first so both cases take one path.
  const first = await source.read(shoff, SHDR_SIZE, "ELF section header 0");
  const count = shnum === 0 ? readU64(first, 32, "extended section count") : shnum;
  const namesIndex = shstrndx === SHN_XINDEX ? first.readUInt32LE(40) : shstrndx;
  if (count > MAX_HEADERS) throw new NotInspectable(`ELF file claims ${count} sections`);
  const table = await source.read(shoff, shentsize * count, "ELF section headers");
  const raw = [];
  for (let i = 0; i < count; i++) {
    const at = i * shentsize;
    raw.push({
      nameOffset: table.readUInt32LE(at),
      type: table.readUInt32LE(at + 4),
      flags: readU64(table, at + 8, "sh_flags"),
      addr: readU64(table, at + 16, "sh_addr"),
      offset: readU64(table, at + 24, "sh_offset"),
      size: readU64(table, at + 32, "sh_size"),
    });
  }
  const namesHeader = raw[namesIndex];
  if (namesHeader === undefined || namesHeader.type === SHT_NOBITS) return raw.map(({ nameOffset: _, ...section }) => ({ ...section, name: "" }));
  if (namesHeader.size > MAX_SHSTRTAB_BYTES) throw new NotInspectable(`ELF section name table is ${namesHeader.size} bytes`);
  const names = await source.read(namesHeader.offset, namesHeader.size, "ELF section names");
  return raw.map(({ nameOffset, ...section }) => ({ name: cString(names, nameOffset), ...section }));
}

function cString(buffer: Buffer, offset: number): string {
  if (offset >= buffer.length) return "";
  const end = buffer.indexOf(0, offset);
  return buffer.toString("latin1", offset, end < 0 ? buffer.length : end);
}

/** The named section if present and backed by file bytes. */
export function findSection(image: ElfImage, name: string): Section | undefined {
  return image.sections.find((s) => s.name === name && s.type !== SHT_NOBITS);
}
