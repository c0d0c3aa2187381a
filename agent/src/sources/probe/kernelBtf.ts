// The kernel types the probe programs read, cut out of the kernel's BTF into
// a file of their own for bpftrace (BPFTRACE_BTF). bpftrace 0.17 parses the
// whole BTF it is given and keeps it for its life: the kernel's is 5 MiB on
// disk and about 11 MiB of each bpftrace's anonymous memory, for the dozen
// structs the programs name. The cut keeps those structs whole, everything
// they hold by value, and, behind a pointer, whole only the structs the
// programs reach through a field of that pointer's name (`curtask->files`
// keeps struct files_struct whole); any other struct behind a pointer is
// left a declaration (`struct mm_struct;`), as C allows and bpftrace needs no
// more of.
//
// BTF is a header, a list of types (ids from 1, 0 is void) each followed by
// data of its kind, and a table of names
// (https://docs.kernel.org/bpf/btf.html). Parsing keeps no object per type
// (the kernel has about 140 000): each type is its offset in the input.

const MAGIC = 0xeb9f;
const UTF8 = new TextDecoder();
const HEADER_BYTES = 24;

const KIND = {
  INT: 1,
  PTR: 2,
  ARRAY: 3,
  STRUCT: 4,
  UNION: 5,
  ENUM: 6,
  FWD: 7,
  TYPEDEF: 8,
  VOLATILE: 9,
  CONST: 10,
  RESTRICT: 11,
  FUNC: 12,
  FUNC_PROTO: 13,
  VAR: 14,
  DATASEC: 15,
  FLOAT: 16,
  DECL_TAG: 17,
  TYPE_TAG: 18,
  ENUM64: 19,
} as const;

/** Kinds that name one other type in their third word and carry nothing more. */
const REFERS = new Set<number>([KIND.PTR, KIND.TYPEDEF, KIND.VOLATILE, KIND.CONST, KIND.RESTRICT, KIND.TYPE_TAG]);
/** Of those, the ones a C reader sees through to the type underneath. */
const SEE_THROUGH = new Set<number>([KIND.TYPEDEF, KIND.VOLATILE, KIND.CONST, KIND.RESTRICT, KIND.TYPE_TAG]);

/** What of the kernel's types a program reads: structs it names, and every field name it reads through `->` or `.`. */
interface KernelTypeUse {
  structs: Set<string>;
  fields: Set<string>;
}

/** The struct and field names in bpftrace programs' text (comments too: a name too many only keeps a type whole). */
export function kernelTypeUse(programs: readonly string[]): KernelTypeUse {
  const structs = new Set<string>();
  const fields = new Set<string>();
  for (const text of programs) {
    for (const m of text.matchAll(/\b(?:struct|union)\s+([A-Za-z_]\w*)/g)) structs.add(m[1]!);
    for (const m of text.matchAll(/(?:->|\.)\s*([A-Za-z_]\w*)/g)) fields.add(m[1]!);
    // bpftrace types curtask as the kernel's struct task_struct.
    if (/\bcurtask\b/.test(text)) structs.add("task_struct");
  }
  return { structs, fields };
}

/**
 * `offsetof(struct NAME, FIELD)` in a program's text: bpftrace 0.17 has no
 * offsetof, so the agent replaces each with the field's byte offset in the
 * running kernel (kernelFieldOffsets), for programs that read kernel memory
 * without naming its types (go_http2.bt: a type named in a uprobe costs the
 * probed binary's DWARF). FIELD may go through members (`__sk_common.skc_dport`).
 */
export const OFFSETOF = /\boffsetof\(struct ([A-Za-z_]\w*), ([A-Za-z_][\w.]*)\)/g;

/** The fields programs take offsets of, as "struct.field" keys (`sock.__sk_common.skc_dport`); comments are not read. */
export function kernelFieldsOf(programs: readonly string[]): string[] {
  const fields = new Set<string>();
  for (const text of programs) {
    const code = text.replace(/\/\*[\s\S]*?\*\/|\/\/[^\n]*/g, "");
    for (const m of code.matchAll(OFFSETOF)) fields.add(`${m[1]}.${m[2]}`);
  }
  return [...fields];
}

/**
 * The byte offset of each "struct.field" key in `kernel` (a BTF): through
 * members held by value, and through unnamed structs and unions, whose
 * fields C reads as their parent's. A struct the BTF lacks, a field it does
 * not have, a step through a pointer or a bit field is an error naming it.
 */
export function kernelFieldOffsets(kernel: Uint8Array, fields: readonly string[]): Record<string, number> {
  const btf = new BtfReader(kernel);
  const wanted = new Set(fields.map((key) => key.slice(0, key.indexOf("."))));
  const structs = new Map<string, number>();
  for (let id = 1; id <= btf.count && structs.size < wanted.size; id++) {
    if (btf.kind(id) !== KIND.STRUCT || btf.vlen(id) === 0) continue;
    const name = btf.name(btf.nameOffset(id));
    if (wanted.has(name) && !structs.has(name)) structs.set(name, id);
  }
  const offsets: Record<string, number> = {};
  for (const key of fields) {
    const [structName, ...path] = key.split(".");
    const root = structs.get(structName!);
    if (root === undefined) throw new Error(`BTF: no struct ${structName} (for ${key})`);
    let type = root;
    let bits = 0;
    for (const [i, step] of path.entries()) {
      const found = memberOf(btf, type, step);
      if (found === null) throw new Error(`BTF: struct ${structName} has no field ${path.slice(0, i + 1).join(".")}`);
      bits += found.bits;
      type = seeThrough(btf, found.type);
      const kind = btf.kind(type);
      if (i < path.length - 1 && kind !== KIND.STRUCT && kind !== KIND.UNION) {
        throw new Error(`BTF: ${structName}.${path.slice(0, i + 1).join(".")} is not a struct or union held by value (kind ${kind}), so ${key} is not in it`);
      }
    }
    if (bits % 8 !== 0) throw new Error(`BTF: ${key} starts at bit ${bits}, not on a byte`);
    offsets[key] = bits / 8;
  }
  return offsets;
}

/** Member `name` of struct or union `id`, at its bit offset, looked for in its unnamed members too. */
function memberOf(btf: BtfReader, id: number, name: string): { type: number; bits: number } | null {
  for (let i = 0; i < btf.vlen(id); i++) {
    const at = btf.dataAt(id) + 12 * i;
    const memberName = btf.name(btf.u32(at));
    const type = btf.u32(at + 4);
    const offsetWord = btf.u32(at + 8);
    // With the kind flag, the top 8 bits are a bit field's size, the rest its offset.
    const bitfieldSize = btf.kindFlag(id) ? offsetWord >>> 24 : 0;
    const bits = btf.kindFlag(id) ? offsetWord & 0xffffff : offsetWord;
    if (memberName === name) {
      if (bitfieldSize !== 0) throw new Error(`BTF: field ${name} is a bit field of ${bitfieldSize} bits`);
      return { type, bits };
    }
    if (memberName === "") {
      const inner = seeThrough(btf, type);
      const kind = btf.kind(inner);
      if (kind !== KIND.STRUCT && kind !== KIND.UNION) continue;
      const found = memberOf(btf, inner, name);
      if (found !== null) return { type: found.type, bits: bits + found.bits };
    }
  }
  return null;
}

/** The type under typedefs and qualifiers. */
function seeThrough(btf: BtfReader, id: number): number {
  let type = id;
  while (type !== 0 && SEE_THROUGH.has(btf.kind(type))) type = btf.third(type);
  return type;
}

/** A BTF blob read in place: each type's byte offset, by id. */
class BtfReader {
  readonly #view: DataView;
  readonly #types: number;
  readonly #strings: number;
  readonly #stringsEnd: number;
  /** offsets[id] is where type `id` starts; offsets[0] (void) is unused. */
  readonly offsets: Uint32Array;

  constructor(raw: Uint8Array) {
    if (raw.byteLength < HEADER_BYTES) throw new Error(`BTF: ${raw.byteLength} bytes, shorter than its ${HEADER_BYTES}-byte header`);
    this.#view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    const magic = this.#view.getUint16(0, true);
    if (magic !== MAGIC) throw new Error(`BTF: magic 0x${magic.toString(16)}, not 0x${MAGIC.toString(16)} (little-endian BTF)`);
    const version = this.#view.getUint8(2);
    if (version !== 1) throw new Error(`BTF: version ${version}, not 1`);
    const headerLength = this.u32(4);
    const [typeOff, typeLen, strOff, strLen] = [this.u32(8), this.u32(12), this.u32(16), this.u32(20)];
    this.#types = headerLength + typeOff;
    this.#strings = headerLength + strOff;
    this.#stringsEnd = this.#strings + strLen;
    if (this.#types + typeLen > raw.byteLength || this.#stringsEnd > raw.byteLength) {
      throw new Error(`BTF: its header claims types ${typeOff}+${typeLen} and names ${strOff}+${strLen} past its ${raw.byteLength} bytes`);
    }
    // Two passes, so that no array of a number per type is ever built on the heap.
    let count = 0;
    for (let at = this.#types; at < this.#types + typeLen; at += this.#typeBytes(at)) count++;
    this.offsets = new Uint32Array(count + 1);
    for (let at = this.#types, id = 1; id <= count; at += this.#typeBytes(at), id++) this.offsets[id] = at;
  }

  u32(at: number): number {
    return this.#view.getUint32(at, true);
  }

  get count(): number {
    return this.offsets.length - 1;
  }

  kind(id: number): number {
    return (this.u32(this.#at(id) + 4) >>> 24) & 0x1f;
  }

  /** The kind's flag bit: a union, for a declaration. */
  kindFlag(id: number): boolean {
    return this.u32(this.#at(id) + 4) >>> 31 === 1;
  }

  vlen(id: number): number {
    return this.u32(this.#at(id) + 4) & 0xffff;
  }

  nameOffset(id: number): number {
    return this.u32(this.#at(id));
  }

  /** The third word: a size (int, struct, enum) or the type referred to. */
  third(id: number): number {
    return this.u32(this.#at(id) + 8);
  }

  /** Where the kind's own data starts (after the 12-byte common part). */
  dataAt(id: number): number {
    return this.#at(id) + 12;
  }

  bytes(id: number): number {
    return this.#typeBytes(this.#at(id));
  }

  name(offset: number): string {
    const start = this.#strings + offset;
    if (offset === 0 || start >= this.#stringsEnd) return "";
    let end = start;
    while (end < this.#stringsEnd && this.#view.getUint8(end) !== 0) end++;
    return UTF8.decode(new Uint8Array(this.#view.buffer, this.#view.byteOffset + start, end - start));
  }

  /** The type's bytes as they are in the input. */
  raw(id: number): Uint8Array {
    const at = this.#at(id);
    return new Uint8Array(this.#view.buffer, this.#view.byteOffset + at, this.#typeBytes(at));
  }

  #at(id: number): number {
    const at = this.offsets[id];
    if (id <= 0 || at === undefined) throw new Error(`BTF: type id ${id} out of 1..${this.count}`);
    return at;
  }

  #typeBytes(at: number): number {
    const info = this.u32(at + 4);
    const kind = (info >>> 24) & 0x1f;
    const vlen = info & 0xffff;
    switch (kind) {
      case KIND.INT:
      case KIND.VAR:
      case KIND.DECL_TAG:
        return 16;
      case KIND.ARRAY:
        return 24;
      case KIND.STRUCT:
      case KIND.UNION:
      case KIND.DATASEC:
      case KIND.ENUM64:
        return 12 + 12 * vlen;
      case KIND.ENUM:
      case KIND.FUNC_PROTO:
        return 12 + 8 * vlen;
      case KIND.PTR:
      case KIND.FWD:
      case KIND.TYPEDEF:
      case KIND.VOLATILE:
      case KIND.CONST:
      case KIND.RESTRICT:
      case KIND.FUNC:
      case KIND.FLOAT:
      case KIND.TYPE_TAG:
        return 12;
      default:
        throw new Error(`BTF: type at byte ${at} has kind ${kind}, which this reader does not know`);
    }
  }
}

/**
 * A BTF holding what `use` reads of `kernel` (the kernel's BTF, e.g.
 * /sys/kernel/btf/vmlinux): see the top of this file. A struct named in
 * `use` that the kernel lacks is left out; bpftrace says so when a program
 * reads it, as it does with the whole BTF.
 */
export function trimKernelBtf(kernel: Uint8Array, use: KernelTypeUse): Uint8Array {
  const btf = new BtfReader(kernel);
  const roots: number[] = [];
  const seenNames = new Set<string>();
  for (let id = 1; id <= btf.count; id++) {
    const kind = btf.kind(id);
    if (kind !== KIND.STRUCT && kind !== KIND.UNION) continue;
    const name = btf.name(btf.nameOffset(id));
    if (use.structs.has(name) && !seenNames.has(name)) {
      seenNames.add(name);
      roots.push(id);
    }
  }
  const whole = wholeStructs(btf, roots, use.fields);
  return writeBtf(btf, roots, whole);
}

/** The structs and unions to keep whole: the roots, what they hold by value, and what they point to through a field the programs read. */
function wholeStructs(btf: BtfReader, roots: readonly number[], fields: ReadonlySet<string>): Set<number> {
  const whole = new Set<number>();
  const queue: number[] = [];
  const keep = (id: number): void => {
    if (!whole.has(id)) {
      whole.add(id);
      queue.push(id);
    }
  };
  /** A bit per way a type was walked (read or not, behind a pointer or not). */
  const walked = new Uint8Array(btf.count + 1);
  /** `read`: whether the field this type belongs to is one the programs read (a pointer's struct is kept whole only then). */
  const walk = (id: number, read: boolean, behindPointer: boolean): void => {
    if (id === 0) return;
    const bit = 1 << ((read ? 2 : 0) + (behindPointer ? 1 : 0));
    if ((walked[id]! & bit) !== 0) return;
    walked[id]! |= bit;
    const kind = btf.kind(id);
    if (kind === KIND.STRUCT || kind === KIND.UNION) {
      const named = btf.nameOffset(id) !== 0;
      if (!behindPointer || read || !named) keep(id);
    } else if (kind === KIND.PTR) {
      walk(btf.third(id), read, true);
    } else if (SEE_THROUGH.has(kind)) {
      walk(btf.third(id), read, behindPointer);
    } else if (kind === KIND.ARRAY) {
      walk(btf.u32(btf.dataAt(id)), read, behindPointer);
    } else if (kind === KIND.FUNC_PROTO) {
      walk(btf.third(id), false, true);
      for (let i = 0; i < btf.vlen(id); i++) walk(btf.u32(btf.dataAt(id) + 8 * i + 4), false, true);
    }
  };
  for (const root of roots) keep(root);
  while (queue.length > 0) {
    const id = queue.pop()!;
    for (let i = 0; i < btf.vlen(id); i++) {
      const member = btf.dataAt(id) + 12 * i;
      const name = btf.name(btf.u32(member));
      // An unnamed member (an embedded struct or union) is read through: its fields are the parent's.
      walk(btf.u32(member + 4), name === "" || fields.has(name), false);
    }
  }
  return whole;
}

/** Writes the types reachable from `roots`, structs not in `whole` as declarations, with new ids and a new name table. */
function writeBtf(btf: BtfReader, roots: readonly number[], whole: ReadonlySet<number>): Uint8Array {
  const names = new NameTable();
  const ids = new Map<number, number>();
  const out: Uint8Array[] = [];
  const place = (id: number): number => {
    if (id === 0) return 0;
    const known = ids.get(id);
    if (known !== undefined) return known;
    const newId = out.length + 1;
    ids.set(id, newId);
    out.push(new Uint8Array(0)); // filled below, once what it refers to has ids (BTF allows references either way)
    const kind = btf.kind(id);
    if ((kind === KIND.STRUCT || kind === KIND.UNION) && !whole.has(id)) {
      out[newId - 1] = declaration(names.add(btf.name(btf.nameOffset(id))), kind === KIND.UNION);
      return newId;
    }
    const bytes = Uint8Array.from(btf.raw(id));
    const view = new DataView(bytes.buffer);
    const set = (at: number, value: number): void => view.setUint32(at, value, true);
    const rename = (at: number): void => set(at, names.add(btf.name(view.getUint32(at, true))));
    const retype = (at: number): void => set(at, place(view.getUint32(at, true)));
    rename(0);
    const vlen = btf.vlen(id);
    if (REFERS.has(kind)) retype(8);
    else if (kind === KIND.ARRAY) {
      retype(12);
      retype(16);
    } else if (kind === KIND.STRUCT || kind === KIND.UNION) {
      for (let i = 0; i < vlen; i++) {
        rename(12 + 12 * i);
        retype(16 + 12 * i);
      }
    } else if (kind === KIND.ENUM) {
      for (let i = 0; i < vlen; i++) rename(12 + 8 * i);
    } else if (kind === KIND.ENUM64) {
      for (let i = 0; i < vlen; i++) rename(12 + 12 * i);
    } else if (kind === KIND.FUNC_PROTO) {
      retype(8);
      for (let i = 0; i < vlen; i++) {
        rename(12 + 8 * i);
        retype(16 + 8 * i);
      }
    } else if (kind !== KIND.INT && kind !== KIND.FLOAT && kind !== KIND.FWD) {
      throw new Error(`BTF: type ${id} of kind ${kind} reached from a struct, which this writer does not copy`);
    }
    out[newId - 1] = bytes;
    return newId;
  };
  for (const root of roots) place(root);

  const types = concat(out);
  const strings = names.bytes();
  const header = new DataView(new ArrayBuffer(HEADER_BYTES));
  header.setUint16(0, MAGIC, true);
  header.setUint8(2, 1);
  header.setUint8(3, 0);
  header.setUint32(4, HEADER_BYTES, true);
  header.setUint32(8, 0, true);
  header.setUint32(12, types.byteLength, true);
  header.setUint32(16, types.byteLength, true);
  header.setUint32(20, strings.byteLength, true);
  return concat([new Uint8Array(header.buffer), types, strings]);
}

/** A forward declaration: `struct name;` (or `union name;`). */
function declaration(nameOffset: number, union: boolean): Uint8Array {
  const view = new DataView(new ArrayBuffer(12));
  view.setUint32(0, nameOffset, true);
  view.setUint32(4, ((KIND.FWD << 24) | (union ? 0x80000000 : 0)) >>> 0, true);
  return new Uint8Array(view.buffer);
}

/** BTF's name table: NUL-terminated names, offset 0 the empty one. */
class NameTable {
  readonly #offsets = new Map<string, number>([["", 0]]);
  readonly #parts: Uint8Array[] = [new Uint8Array(1)];
  #size = 1;

  add(name: string): number {
    const known = this.#offsets.get(name);
    if (known !== undefined) return known;
    const encoded = Buffer.from(`${name}\0`);
    const offset = this.#size;
    this.#offsets.set(name, offset);
    this.#parts.push(encoded);
    this.#size += encoded.byteLength;
    return offset;
  }

  bytes(): Uint8Array {
    return concat(this.#parts);
  }
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  const all = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const part of parts) {
    all.set(part, at);
    at += part.byteLength;
  }
  return all;
}

/**
 * The structs, unions and declarations a BTF holds, a line each in C's words
 * (`struct root { self: *struct root; peer: *fwd struct hidden }`): for
 * reading a cut, in tests and by hand.
 */
export function describeBtf(raw: Uint8Array): string[] {
  const btf = new BtfReader(raw);
  const typeName = (id: number): string => {
    if (id === 0) return "void";
    const kind = btf.kind(id);
    const name = btf.name(btf.nameOffset(id)) || "(anon)";
    switch (kind) {
      case KIND.PTR:
        return `*${typeName(btf.third(id))}`;
      case KIND.CONST:
        return `const ${typeName(btf.third(id))}`;
      case KIND.VOLATILE:
        return `volatile ${typeName(btf.third(id))}`;
      case KIND.STRUCT:
        return `struct ${name}`;
      case KIND.UNION:
        return `union ${name}`;
      case KIND.FWD:
        return `fwd ${btf.kindFlag(id) ? "union" : "struct"} ${name}`;
      case KIND.ENUM:
      case KIND.ENUM64:
        return `enum ${name}`;
      case KIND.ARRAY:
        return `${typeName(btf.u32(btf.dataAt(id)))}[${btf.u32(btf.dataAt(id) + 8)}]`;
      case KIND.FUNC_PROTO:
        return `fn(${Array.from({ length: btf.vlen(id) }, (_, i) => typeName(btf.u32(btf.dataAt(id) + 8 * i + 4))).join(", ")}) ${typeName(btf.third(id))}`;
      default:
        return name;
    }
  };
  const lines: string[] = [];
  for (let id = 1; id <= btf.count; id++) {
    const kind = btf.kind(id);
    if (kind === KIND.FWD) lines.push(typeName(id));
    if (kind !== KIND.STRUCT && kind !== KIND.UNION) continue;
    const members = Array.from({ length: btf.vlen(id) }, (_, i) => {
      const at = btf.dataAt(id) + 12 * i;
      return `${btf.name(btf.u32(at)) || "(anon)"}: ${typeName(btf.u32(at + 4))}`;
    });
    lines.push(`${typeName(id)} { ${members.join("; ")} }`);
  }
  return lines;
}
