// Minimal amd64 ELF files shaped like Go binaries of releases the local
// toolchain cannot produce: the Go 1.16–1.17 pclntab (absolute, pointer-sized
// function table entries), the pre-1.16 magic, and the pointer-format build
// info that Go wrote before 1.18. They carry only what the inspection reads:
// three PT_LOAD segments (code, read-only data holding the pclntab, data
// holding the build info) and no section headers, as sstrip leaves a binary.
const TEXT_VADDR = 0x401000;
const TEXT_OFFSET = 0x1000;
const TEXT_SIZE = 0x1000;
const RODATA_OFFSET = 0x2000;
const RODATA_VADDR = 0x602000;
const DATA_VADDR_BASE = 0x800000;

/** Go's amd64 register-ABI stack check: CMPQ SP, 16(R14). */
const STACK_CHECK = Buffer.from([0x49, 0x3b, 0x66, 0x10]);

export interface SyntheticFunction {
  name: string;
  /** Offset of the entry from the start of the code segment (below 0x800). */
  at: number;
  /** Leave the stack check out, as if the table pointed at the wrong bytes. */
  noStackCheck?: boolean;
}

export interface SyntheticGoSpec {
  magic: "go1.16" | "go1.2";
  /** runtime.buildVersion; null for a binary without build info. */
  goVersion: string | null;
  /** Module info lines ("dep\tgolang.org/x/net\tv0.1.0\th1:…"). */
  modules?: string[];
  functions: SyntheticFunction[];
}

/** Where a function of `spec` is linked. */
export function syntheticVaddr(fn: SyntheticFunction): number {
  return TEXT_VADDR + fn.at;
}

/** Where that function is in the file. */
export function syntheticFileOffset(fn: SyntheticFunction): number {
  return TEXT_OFFSET + fn.at;
}

function u64(value: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(value));
  return b;
}

function align(n: number, to: number): number {
  return Math.ceil(n / to) * to;
}

function pclntab(spec: SyntheticGoSpec): Buffer {
  const functions = [...spec.functions].sort((a, b) => a.at - b.at);
  const names: Buffer[] = [];
  const nameOffsets: number[] = [];
  let namesLength = 0;
  for (const fn of functions) {
    nameOffsets.push(namesLength);
    const bytes = Buffer.from(`${fn.name}\0`, "latin1");
    names.push(bytes);
    namesLength += bytes.length;
  }
  const headerBytes = 8 + 7 * 8;
  const funcnameOffset = headerBytes;
  const cuOffset = funcnameOffset + namesLength;
  const pclnOffset = align(cuOffset, 8);
  const functabBytes = (functions.length * 2 + 1) * 8;
  const recordBytes = 16;

  const header = Buffer.alloc(headerBytes);
  header.writeUInt32LE(spec.magic === "go1.16" ? 0xfffffffa : 0xfffffffb, 0);
  header[6] = 1;
  header[7] = 8;
  [functions.length, 0, funcnameOffset, cuOffset, cuOffset, cuOffset, pclnOffset].forEach((word, i) => header.writeBigUInt64LE(BigInt(word), 8 + i * 8));

  const functab = Buffer.concat([
    ...functions.flatMap((fn, i) => [u64(syntheticVaddr(fn)), u64(functabBytes + i * recordBytes)]),
    u64(TEXT_VADDR + 0x800),
  ]);
  const records = Buffer.concat(
    functions.map((fn, i) => {
      const record = Buffer.alloc(recordBytes);
      record.writeBigUInt64LE(BigInt(syntheticVaddr(fn)), 0);
      record.writeInt32LE(nameOffsets[i]!, 8);
      return record;
    }),
  );
  return Buffer.concat([header, ...names, Buffer.alloc(pclnOffset - cuOffset), functab, records]);
}

/** Pointer-format build info: the header, two Go string headers, then the strings. */
function buildInfo(spec: SyntheticGoSpec, vaddr: number): Buffer {
  if (spec.goVersion === null) return Buffer.alloc(64);
  const version = Buffer.from(spec.goVersion, "utf8");
  // cmd/go frames module info with 16-byte sentinels; any 16 bytes do here.
  const modinfo = Buffer.concat([Buffer.alloc(16, 0x30), Buffer.from(`${(spec.modules ?? []).join("\n")}\n`, "utf8"), Buffer.alloc(16, 0xf9)]);
  const versionHeaderAt = vaddr + 32;
  const modinfoHeaderAt = vaddr + 48;
  const versionAt = vaddr + 64;
  const modinfoAt = versionAt + version.length;
  const header = Buffer.alloc(32);
  Buffer.from("\xff Go buildinf:", "latin1").copy(header);
  header[14] = 8;
  header[15] = 0;
  header.writeBigUInt64LE(BigInt(versionHeaderAt), 16);
  header.writeBigUInt64LE(BigInt(modinfoHeaderAt), 24);
  return Buffer.concat([header, u64(versionAt), u64(version.length), u64(modinfoAt), u64(modinfo.length), version, modinfo]);
}

export function syntheticGoElf(spec: SyntheticGoSpec): Buffer {
  const text = Buffer.alloc(TEXT_SIZE, 0xcc);
  for (const fn of spec.functions) if (!fn.noStackCheck) STACK_CHECK.copy(text, fn.at);
  const rodata = pclntab(spec);
  const dataOffset = align(RODATA_OFFSET + rodata.length, 0x1000);
  const dataVaddr = DATA_VADDR_BASE + dataOffset;
  const data = buildInfo(spec, dataVaddr);

  const segments = [
    { flags: 5, offset: TEXT_OFFSET, vaddr: TEXT_VADDR, size: TEXT_SIZE },
    { flags: 4, offset: RODATA_OFFSET, vaddr: RODATA_VADDR, size: rodata.length },
    { flags: 6, offset: dataOffset, vaddr: dataVaddr, size: data.length },
  ];
  const file = Buffer.alloc(dataOffset + data.length);
  Buffer.from([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1]).copy(file);
  file.writeUInt16LE(2, 16); // ET_EXEC
  file.writeUInt16LE(62, 18); // EM_X86_64
  file.writeUInt32LE(1, 20);
  file.writeBigUInt64LE(BigInt(TEXT_VADDR), 24);
  file.writeBigUInt64LE(64n, 32); // e_phoff; e_shoff stays 0: no section headers
  file.writeUInt16LE(64, 52);
  file.writeUInt16LE(56, 54);
  file.writeUInt16LE(segments.length, 56);
  file.writeUInt16LE(64, 58);
  segments.forEach((s, i) => {
    const at = 64 + i * 56;
    file.writeUInt32LE(1, at); // PT_LOAD
    file.writeUInt32LE(s.flags, at + 4);
    file.writeBigUInt64LE(BigInt(s.offset), at + 8);
    file.writeBigUInt64LE(BigInt(s.vaddr), at + 16);
    file.writeBigUInt64LE(BigInt(s.vaddr), at + 24);
    file.writeBigUInt64LE(BigInt(s.size), at + 32);
    file.writeBigUInt64LE(BigInt(s.size), at + 40);
    file.writeBigUInt64LE(0x1000n, at + 48);
  });
  text.copy(file, TEXT_OFFSET);
  rodata.copy(file, RODATA_OFFSET);
  data.copy(file, dataOffset);
  return file;
}
