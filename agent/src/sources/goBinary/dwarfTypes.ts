// The DWARF a Go binary keeps unless built with -w (kubebuilder's plain
// `go build` keeps it): enough of .debug_info to name the struct types and
// their members' offsets, pointer and typedef targets, and the parameters of
// chosen functions. What http2Layouts.ts's table says of a release, this says
// of the very binary. Go writes DWARF 4 or 5, 32-bit, zlib-compressed
// sections (SHF_COMPRESSED), names inline; every attribute form of DWARF 5 is
// stepped over, so an unknown producer cannot derail the walk silently: a
// form it cannot size ends the reading with an error.
import { inflateSync } from "node:zlib";
import type { ByteSource } from "./byteSource.ts";
import type { ElfImage, Section } from "./elfImage.ts";
import { findSection } from "./elfImage.ts";
import { NotInspectable } from "./notInspectable.ts";

/** A struct: its members by name, each at an offset, of a type (a DIE offset). */
export interface DwarfStruct {
  name: string;
  members: Map<string, { offset: number; type: number | null }>;
}

/** A parameter of a function, in order (results too, after the inputs, as Go writes them). */
export interface DwarfParameter {
  name: string;
  type: number | null;
}

export interface DwarfTypes {
  /** DIE offset → a struct. */
  structs: Map<number, DwarfStruct>;
  /** Struct name → DIE offset. */
  structsByName: Map<string, number>;
  /** DIE offset of a pointer or typedef → its target. */
  targets: Map<number, number>;
  /** DIE offset → a base type's byte size (uint32: 4). */
  baseSizes: Map<number, number>;
  /** The parameters of the functions asked for, by their full name. */
  functions: Map<string, DwarfParameter[]>;
}

const SHF_COMPRESSED = 0x800;
const ELFCOMPRESS_ZLIB = 1;
/** Uncompressed DWARF of the largest operators is tens of MiB; more is a reason to stop. */
const MAX_DWARF_BYTES = 512 * 1024 * 1024;

const TAG = { member: 0x0d, pointer: 0x0f, struct: 0x13, typedef: 0x16, base: 0x24, subprogram: 0x2e, parameter: 0x05 } as const;
const AT = { name: 0x03, byteSize: 0x0b, memberLocation: 0x38, type: 0x49 } as const;
const FORM_IMPLICIT_CONST = 0x21;
const FORM_INDIRECT = 0x16;

/** A section's bytes, inflated when compressed. */
async function sectionBytes(source: ByteSource, section: Section): Promise<Buffer> {
  const raw = await source.read(section.offset, section.size, section.name);
  if ((section.flags & SHF_COMPRESSED) === 0) return raw;
  // Elf64_Chdr: ch_type, ch_reserved, ch_size, ch_addralign.
  if (raw.length < 24 || raw.readUInt32LE(0) !== ELFCOMPRESS_ZLIB) throw new NotInspectable(`${section.name}: not zlib-compressed`);
  const size = Number(raw.readBigUInt64LE(8));
  if (size > MAX_DWARF_BYTES) throw new NotInspectable(`${section.name}: ${size} bytes uncompressed is more than ${MAX_DWARF_BYTES}`);
  return inflateSync(raw.subarray(24), { maxOutputLength: size });
}

/** A cursor over one buffer. */
class Reader {
  at: number;
  readonly buf: Buffer;
  constructor(buf: Buffer, at = 0) {
    this.buf = buf;
    this.at = at;
  }
  u8(): number {
    return this.buf.readUInt8(this.at++);
  }
  u16(): number {
    const v = this.buf.readUInt16LE(this.at);
    this.at += 2;
    return v;
  }
  u32(): number {
    const v = this.buf.readUInt32LE(this.at);
    this.at += 4;
    return v;
  }
  u64(): number {
    const v = Number(this.buf.readBigUInt64LE(this.at));
    this.at += 8;
    return v;
  }
  uleb(): number {
    let result = 0;
    let scale = 1;
    for (;;) {
      const byte = this.u8();
      result += (byte & 0x7f) * scale;
      if ((byte & 0x80) === 0) return result;
      scale *= 128;
    }
  }
  sleb(): number {
    let result = 0;
    let scale = 1;
    let byte: number;
    do {
      byte = this.u8();
      result += (byte & 0x7f) * scale;
      scale *= 128;
    } while (byte & 0x80);
    return byte & 0x40 ? result - scale : result;
  }
  cstring(): string {
    const end = this.buf.indexOf(0, this.at);
    if (end < 0) throw new RangeError("DWARF string runs past its section");
    const text = this.buf.toString("utf8", this.at, end);
    this.at = end + 1;
    return text;
  }
}

interface Abbrev {
  tag: number;
  children: boolean;
  attrs: { name: number; form: number; implicit: number }[];
}

function readAbbrevs(abbrev: Buffer, offset: number): Map<number, Abbrev> {
  const table = new Map<number, Abbrev>();
  const r = new Reader(abbrev, offset);
  for (;;) {
    const code = r.uleb();
    if (code === 0) return table;
    const tag = r.uleb();
    const children = r.u8() === 1;
    const attrs: Abbrev["attrs"] = [];
    for (;;) {
      const name = r.uleb();
      const form = r.uleb();
      if (name === 0 && form === 0) break;
      attrs.push({ name, form, implicit: form === FORM_IMPLICIT_CONST ? r.sleb() : 0 });
    }
    table.set(code, { tag, children, attrs });
  }
}

/** Reads one attribute value: a number for constants and references (absolute for refs), a string for inline names, null otherwise. */
function readForm(r: Reader, form: number, unitStart: number, addressSize: number, implicit: number): number | string | null {
  const skip = (n: number): null => {
    r.at += n;
    return null;
  };
  switch (form) {
    case 0x01: return skip(addressSize); // addr
    case 0x03: return skip(r.u16()); // block2
    case 0x04: return skip(r.u32()); // block4
    case 0x05: return r.u16(); // data2
    case 0x06: return r.u32(); // data4
    case 0x07: return r.u64(); // data8
    case 0x08: return r.cstring(); // string
    case 0x09: return skip(r.uleb()); // block
    case 0x0a: return skip(r.u8()); // block1
    case 0x0b: return r.u8(); // data1
    case 0x0c: return r.u8(); // flag
    case 0x0d: return r.sleb(); // sdata
    case 0x0e: case 0x17: case 0x1c: case 0x1d: case 0x1f: return skip(4); // strp, sec_offset, ref_sup4, strp_sup, line_strp
    case 0x0f: return r.uleb(); // udata
    case 0x10: return r.u32(); // ref_addr: absolute
    case 0x11: return unitStart + r.u8(); // ref1
    case 0x12: return unitStart + r.u16(); // ref2
    case 0x13: return unitStart + r.u32(); // ref4
    case 0x14: return unitStart + r.u64(); // ref8
    case 0x15: return unitStart + r.uleb(); // ref_udata
    case FORM_INDIRECT: return readForm(r, r.uleb(), unitStart, addressSize, implicit);
    case 0x18: return skip(r.uleb()); // exprloc
    case 0x19: return 1; // flag_present
    case 0x1a: case 0x1b: case 0x22: case 0x23: r.uleb(); return null; // strx, addrx, loclistx, rnglistx
    case 0x1e: return skip(16); // data16
    case 0x20: case 0x24: return skip(8); // ref_sig8, ref_sup8
    case FORM_IMPLICIT_CONST: return implicit;
    case 0x25: case 0x29: return skip(1); // strx1, addrx1
    case 0x26: case 0x2a: return skip(2); // strx2, addrx2
    case 0x27: case 0x2b: return skip(3); // strx3, addrx3
    case 0x28: case 0x2c: return skip(4); // strx4, addrx4
    default: throw new NotInspectable(`DWARF attribute form 0x${form.toString(16)} is unknown`);
  }
}

/**
 * The types of `source`'s DWARF and the parameters of `functionNames`; null
 * when the binary has no DWARF (built with -w, or stripped).
 */
export async function readDwarfTypes(source: ByteSource, image: ElfImage, functionNames: readonly string[]): Promise<DwarfTypes | null> {
  const infoSection = findSection(image, ".debug_info");
  const abbrevSection = findSection(image, ".debug_abbrev");
  if (infoSection === undefined || abbrevSection === undefined) return null;
  const info = await sectionBytes(source, infoSection);
  const abbrev = await sectionBytes(source, abbrevSection);
  const wanted = new Set(functionNames);
  const types: DwarfTypes = { structs: new Map(), structsByName: new Map(), targets: new Map(), baseSizes: new Map(), functions: new Map() };
  const abbrevTables = new Map<number, Map<number, Abbrev>>();
  let unitStart = 0;
  while (unitStart < info.length) {
    const r = new Reader(info, unitStart);
    const length = r.u32();
    if (length === 0xffffffff) throw new NotInspectable("64-bit DWARF is not read");
    const unitEnd = unitStart + 4 + length;
    const version = r.u16();
    let abbrevOffset: number;
    let addressSize: number;
    if (version >= 5) {
      r.u8(); // unit type
      addressSize = r.u8();
      abbrevOffset = r.u32();
    } else if (version >= 2) {
      abbrevOffset = r.u32();
      addressSize = r.u8();
    } else {
      throw new NotInspectable(`DWARF version ${version} is not read`);
    }
    let table = abbrevTables.get(abbrevOffset);
    if (table === undefined) abbrevTables.set(abbrevOffset, (table = readAbbrevs(abbrev, abbrevOffset)));
    // The struct or function whose children are being read, by depth.
    const parents: (DwarfStruct | DwarfParameter[] | null)[] = [];
    while (r.at < unitEnd) {
      const dieOffset = r.at;
      const code = r.uleb();
      if (code === 0) {
        parents.pop();
        continue;
      }
      const entry = table.get(code);
      if (entry === undefined) throw new NotInspectable(`DWARF entry at 0x${dieOffset.toString(16)} uses abbreviation ${code}, which is not defined`);
      let name: string | null = null;
      let type: number | null = null;
      let location: number | null = null;
      let byteSize: number | null = null;
      for (const attr of entry.attrs) {
        const value = readForm(r, attr.form, unitStart, addressSize, attr.implicit);
        if (attr.name === AT.name && typeof value === "string") name = value;
        else if (attr.name === AT.type && typeof value === "number") type = value;
        else if (attr.name === AT.memberLocation && typeof value === "number") location = value;
        else if (attr.name === AT.byteSize && typeof value === "number") byteSize = value;
      }
      const parent = parents.at(-1) ?? null;
      let opened: DwarfStruct | DwarfParameter[] | null = null;
      if (entry.tag === TAG.struct && name !== null) {
        opened = { name, members: new Map() };
        types.structs.set(dieOffset, opened);
        types.structsByName.set(name, dieOffset);
      } else if ((entry.tag === TAG.pointer || entry.tag === TAG.typedef) && type !== null) {
        types.targets.set(dieOffset, type);
      } else if (entry.tag === TAG.base && byteSize !== null) {
        types.baseSizes.set(dieOffset, byteSize);
      } else if (entry.tag === TAG.subprogram && name !== null && wanted.has(name)) {
        opened = [];
        types.functions.set(name, opened);
      } else if (entry.tag === TAG.member && name !== null && location !== null && parent !== null && !Array.isArray(parent)) {
        parent.members.set(name, { offset: location, type });
      } else if (entry.tag === TAG.parameter && name !== null && Array.isArray(parent)) {
        parent.push({ name, type });
      }
      if (entry.children) parents.push(opened);
    }
    unitStart = unitEnd;
  }
  return types;
}
