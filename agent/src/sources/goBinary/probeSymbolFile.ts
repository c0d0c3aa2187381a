// Names for the cheap probe points of a binary that keeps its symbol table.
//
// A uprobe on the jump that ends a Go function's stack check costs a quarter
// of one on its entry (stackCheckPrologue.ts), but bpftrace 0.17 as Debian
// builds it (without HAVE_UNSAFE_PROBE nor disassembler support) refuses
// every probe that its symbol lookup places inside a function: `SYMBOL+N`
// and an address past a symbol's start are both "Can't check if uprobe is in
// proper place", --unsafe or not. Only a probe at a symbol's start passes.
//
// So each jump is given a symbol of its own, in a separate debug file where
// bcc (which bpftrace resolves symbols with) looks first: for a binary with a
// GNU build id (every Go 1.24+ binary has one), the ELF file
// /usr/lib/debug/.build-id/<2 hex>/<rest>.debug. Its symbols are named
// lostwrite_* and exist in no binary, so `uprobe:BINARY:lostwrite_…` resolves
// there alone: at offset 0 of that symbol, whose address bcc turns into the
// file offset of the jump through the binary's own segments. The file holds a
// symbol table and nothing else, so a debugger finding it learns nothing
// wrong about the binary: no other name, no line, no type.
//
// The file is only written where none is: a real debug file of that binary
// is never replaced (its probes then go at the entries). Where the directory
// cannot be written (a read-only root filesystem without a volume there) the
// entries are used too.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import type { ByteSource } from "./byteSource.ts";
import { findSection, type ElfImage } from "./elfImage.ts";
import type { Http2FamilyName, Http2Function } from "./http2Families.ts";

/** Where bcc looks for a binary's separate debug file by build id (bcc_elf.c, find_debug_via_buildid). */
export const DEBUG_BUILD_ID_ROOT = "/usr/lib/debug/.build-id";

/** Every symbol this module writes starts so; a file whose symbols all do is the agent's own. */
const PROBE_SYMBOL_PREFIX = "lostwrite_";

/** The hex build id of the binary's .note.gnu.build-id, or null when it has none. */
export async function gnuBuildId(source: ByteSource, image: ElfImage): Promise<string | null> {
  const note = findSection(image, ".note.gnu.build-id");
  if (note === undefined || note.size < 16 || note.size > 1024) return null;
  const bytes = await source.read(note.offset, note.size, ".note.gnu.build-id");
  const nameSize = bytes.readUInt32LE(0);
  const descSize = bytes.readUInt32LE(4);
  const type = bytes.readUInt32LE(8);
  const descAt = 12 + ((nameSize + 3) & ~3);
  // NT_GNU_BUILD_ID (3), owner "GNU\0"; bcc reads the bytes after the 16-byte header.
  if (type !== 3 || nameSize !== 4 || bytes.toString("latin1", 12, 15) !== "GNU" || descSize === 0 || descAt + descSize > bytes.length) return null;
  return bytes.toString("hex", descAt, descAt + descSize);
}

/** Where bcc looks for the debug file of the binary with this build id. */
export function debugFilePath(buildId: string, root = DEBUG_BUILD_ID_ROOT): string {
  if (!/^[0-9a-f]{4,}$/.test(buildId)) throw new RangeError(`build id must be lowercase hex: "${buildId}"`);
  return path.join(root, buildId.slice(0, 2), `${buildId.slice(2)}.debug`);
}

interface ProbeSymbol {
  /** lostwrite_…: letters, digits and underscores, as a bpftrace attach point takes them unquoted. */
  name: string;
  /** The address the symbol names: a jump past a function's stack check. */
  vaddr: number;
}

/** The name of the jump past `fn`'s stack check in `family`: lostwrite_xnet_processHeaders. */
export function probeSymbolName(family: Http2FamilyName, fn: Http2Function): string {
  return `${PROBE_SYMBOL_PREFIX}${family.replace(/\W/g, "")}_${fn}`;
}

/** The symbols of every probed function's jump, in the families given (functions without one are probed at their entry). */
export function probeSymbolsOf(families: readonly { name: Http2FamilyName; functions: Record<Http2Function, { branchVaddr: number | null }> }[]): ProbeSymbol[] {
  return families.flatMap((family) =>
    (Object.entries(family.functions) as [Http2Function, { branchVaddr: number | null }][])
      .filter(([, location]) => location.branchVaddr !== null)
      .map(([fn, location]) => ({ name: probeSymbolName(family.name, fn), vaddr: location.branchVaddr! })),
  );
}

const STT_FUNC = 2;
const STB_GLOBAL = 1;
const SHN_ABS = 0xfff1;
const SHT_SYMTAB = 2;
const SHT_STRTAB = 3;
const SYM_SIZE = 24;
const SHDR_SIZE = 64;

/**
 * An ELF64 file holding only a symbol table: each symbol a function of one
 * byte (bpftrace refuses a probe at an offset not below the symbol's size,
 * and 0 is not below 0) at an absolute address.
 */
export function symbolFile(symbols: readonly ProbeSymbol[]): Buffer {
  for (const { name } of symbols) {
    if (!name.startsWith(PROBE_SYMBOL_PREFIX) || !/^\w+$/.test(name)) throw new RangeError(`probe symbol name must be ${PROBE_SYMBOL_PREFIX} and word characters: "${name}"`);
  }
  const strtab = Buffer.concat([Buffer.alloc(1), ...symbols.map(({ name }) => Buffer.from(`${name}\0`, "latin1"))]);
  const shstrtab = Buffer.from("\0.symtab\0.strtab\0.shstrtab\0", "latin1");
  const symtab = Buffer.alloc(SYM_SIZE * (symbols.length + 1));
  let nameAt = 1;
  symbols.forEach(({ name, vaddr }, i) => {
    const at = SYM_SIZE * (i + 1);
    symtab.writeUInt32LE(nameAt, at);
    symtab[at + 4] = (STB_GLOBAL << 4) | STT_FUNC;
    symtab.writeUInt16LE(SHN_ABS, at + 6);
    symtab.writeBigUInt64LE(BigInt(vaddr), at + 8);
    symtab.writeBigUInt64LE(1n, at + 16);
    nameAt += name.length + 1;
  });
  const symtabAt = 64;
  const strtabAt = symtabAt + symtab.length;
  const shstrtabAt = strtabAt + strtab.length;
  const headersAt = (shstrtabAt + shstrtab.length + 7) & ~7;

  const header = Buffer.alloc(64);
  header.write("\x7fELF", 0, "latin1");
  header[4] = 2; // ELFCLASS64
  header[5] = 1; // little endian
  header[6] = 1; // EV_CURRENT
  header.writeUInt16LE(2, 16); // ET_EXEC, as the binary it describes
  header.writeUInt16LE(62, 18); // EM_X86_64
  header.writeUInt32LE(1, 20);
  header.writeBigUInt64LE(BigInt(headersAt), 40);
  header.writeUInt16LE(64, 52); // e_ehsize
  header.writeUInt16LE(SHDR_SIZE, 58);
  header.writeUInt16LE(4, 60); // null, .symtab, .strtab, .shstrtab
  header.writeUInt16LE(3, 62);

  const sections = Buffer.alloc(SHDR_SIZE * 4);
  const section = (index: number, name: number, type: number, offset: number, size: number, link: number, info: number, entsize: number): void => {
    const at = SHDR_SIZE * index;
    sections.writeUInt32LE(name, at);
    sections.writeUInt32LE(type, at + 4);
    sections.writeBigUInt64LE(BigInt(offset), at + 24);
    sections.writeBigUInt64LE(BigInt(size), at + 32);
    sections.writeUInt32LE(link, at + 40);
    sections.writeUInt32LE(info, at + 44);
    sections.writeBigUInt64LE(1n, at + 48);
    sections.writeBigUInt64LE(BigInt(entsize), at + 56);
  };
  section(1, 1, SHT_SYMTAB, symtabAt, symtab.length, 2, 1, SYM_SIZE);
  section(2, 9, SHT_STRTAB, strtabAt, strtab.length, 0, 0, 0);
  section(3, 17, SHT_STRTAB, shstrtabAt, shstrtab.length, 0, 0, 0);
  return Buffer.concat([header, symtab, strtab, shstrtab, Buffer.alloc(headersAt - shstrtabAt - shstrtab.length), sections]);
}

/** The names in an ELF64 file's symbol tables; null when it is no ELF64 file or they cannot be read. */
function symbolNames(file: Buffer): string[] | null {
  if (file.length < 64 || file.toString("latin1", 0, 4) !== "\x7fELF" || file[4] !== 2) return null;
  const headersAt = Number(file.readBigUInt64LE(40));
  const count = file.readUInt16LE(60);
  if (headersAt + count * SHDR_SIZE > file.length) return null;
  const names: string[] = [];
  for (let i = 0; i < count; i++) {
    const at = headersAt + i * SHDR_SIZE;
    if (file.readUInt32LE(at + 4) !== SHT_SYMTAB) continue;
    const offset = Number(file.readBigUInt64LE(at + 24));
    const size = Number(file.readBigUInt64LE(at + 32));
    const link = file.readUInt32LE(at + 40);
    if (link >= count || offset + size > file.length) return null;
    const strtabAt = Number(file.readBigUInt64LE(headersAt + link * SHDR_SIZE + 24));
    for (let sym = offset + SYM_SIZE; sym + SYM_SIZE <= offset + size; sym += SYM_SIZE) {
      const nameAt = strtabAt + file.readUInt32LE(sym);
      const end = file.indexOf(0, nameAt);
      if (nameAt >= file.length || end < 0) return null;
      names.push(file.toString("latin1", nameAt, end));
    }
  }
  return names;
}

/** Whether `file` is one this module wrote: an ELF file whose symbols all start with the prefix. */
function isOurs(file: Buffer): boolean {
  try {
    const names = symbolNames(file);
    return names !== null && names.length > 0 && names.every((n) => n.startsWith(PROBE_SYMBOL_PREFIX));
  } catch {
    return false; // a read past the end: not ours
  }
}

function readIfThere(file: string): Buffer | null {
  try {
    return readFileSync(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
}

/**
 * Writes the probe symbols of the binary with `buildId`, right before a
 * program that attaches by them starts (bpftrace reads them only then); the
 * file written, or why not (a debug file of its own is there, or the
 * directory cannot be written), in which case the entries are probed.
 * Synchronous: a few hundred bytes, written while the program is rendered.
 */
export function writeProbeSymbols(buildId: string, symbols: readonly ProbeSymbol[], root = DEBUG_BUILD_ID_ROOT): { file: string } | { reason: string } {
  const file = debugFilePath(buildId, root);
  try {
    const existing = readIfThere(file);
    if (existing !== null && !isOurs(existing)) return { reason: `${file} exists: the binary's own debug file is left alone` };
    const content = symbolFile(symbols);
    if (existing !== null && existing.equals(content)) return { file };
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, content);
    return { file };
  } catch (error) {
    return { reason: `cannot write ${file}: ${error instanceof Error ? error.message : String(error)}` };
  }
}

/**
 * Removes a file writeProbeSymbols wrote. Another agent on the node may
 * still run a program of the same binary: attached already, it needs the
 * file no more, and it writes it again before it starts another.
 */
export function removeProbeSymbols(file: string): void {
  try {
    const existing = readIfThere(file);
    if (existing !== null && isOurs(existing)) rmSync(file, { force: true });
  } catch {
    // unreadable: nothing of ours to remove
  }
}
