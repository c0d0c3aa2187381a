// The debug file that names a binary's probe points: an ELF file with a symbol
// table alone, found by bcc through the binary's build id. Written only where
// no debug file of the binary's own is, removed only when it is the agent's.
// That bpftrace 0.17 attaches by these names, past the stack check of a real
// binary with symbols, is the e2e tests' (crOperator, goRequests) and the
// bench's (npm run bench:go).
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import {
  debugFilePath,
  probeSymbolName,
  probeSymbolsOf,
  removeProbeSymbols,
  symbolFile,
  writeProbeSymbols,
} from "../../../../src/sources/goBinary/probeSymbolFile.ts";

const root = mkdtempSync(path.join(os.tmpdir(), "lostwrite-probe-symbols-"));
after(() => rmSync(root, { recursive: true, force: true }));

const BUILD_ID = "8709f0491947faec04d9c86fe7185e8e106c5bd7";
const SYMBOLS = [
  { name: "lostwrite_xnet_processHeaders", vaddr: 0x6895a9 },
  { name: "lostwrite_std_cleanup", vaddr: 0x1234567 },
];

/** The symbol table of an ELF file: name, value, size, type and binding, section index. */
function symbolsIn(file: Buffer): { name: string; value: number; size: number; info: number; shndx: number }[] {
  const count = file.readUInt32LE(Number(file.readBigUInt64LE(40)) + 64 + 32) / 24; // .symtab's sh_size / entsize
  const symtabAt = Number(file.readBigUInt64LE(Number(file.readBigUInt64LE(40)) + 64 + 24));
  const strtabAt = Number(file.readBigUInt64LE(Number(file.readBigUInt64LE(40)) + 128 + 24));
  const symbols = [];
  for (let i = 1; i < count; i++) {
    const at = symtabAt + 24 * i;
    const nameAt = strtabAt + file.readUInt32LE(at);
    symbols.push({
      name: file.toString("latin1", nameAt, file.indexOf(0, nameAt)),
      value: Number(file.readBigUInt64LE(at + 8)),
      size: Number(file.readBigUInt64LE(at + 16)),
      info: file[at + 4]!,
      shndx: file.readUInt16LE(at + 6),
    });
  }
  return symbols;
}

describe("probe symbol files", { timeout: 10_000 }, () => {
  it("is an x86-64 ELF file whose symbol table names each jump, one byte long, at its address", () => {
    const file = symbolFile(SYMBOLS);
    assert.equal(file.toString("latin1", 0, 4), "\x7fELF");
    assert.deepEqual([file[4], file[5], file.readUInt16LE(18)], [2, 1, 62], "ELF64, little endian, x86-64");
    const sections = Number(file.readBigUInt64LE(40));
    assert.deepEqual([1, 2, 3].map((i) => file.readUInt32LE(sections + 64 * i + 4)), [2, 3, 3], ".symtab, .strtab, .shstrtab");
    // GLOBAL FUNC, absolute: bpftrace takes a probe at offset 0 of a symbol whose size is above 0.
    assert.deepEqual(symbolsIn(file), SYMBOLS.map(({ name, vaddr }) => ({ name, value: vaddr, size: 1, info: 0x12, shndx: 0xfff1 })));
  });

  it("names each function of each family once, in word characters bpftrace takes unquoted; a function without a jump is left out", () => {
    const functions = { encodeAndWriteHeaders: { branchVaddr: 0x401009 }, processHeaders: { branchVaddr: null }, processResetStream: { branchVaddr: 0x402004 }, processGoAway: { branchVaddr: 0x403004 }, cleanup: { branchVaddr: 0x404004 }, writeStreamReset: { branchVaddr: 0x405004 } };
    const symbols = probeSymbolsOf([{ name: "x/net", functions }, { name: "std", functions }]);
    assert.equal(symbols.length, 10);
    assert.equal(new Set(symbols.map((s) => s.name)).size, 10);
    assert.ok(symbols.every((s) => /^lostwrite_\w+$/.test(s.name)));
    assert.equal(probeSymbolName("x/net", "processHeaders"), "lostwrite_xnet_processHeaders");
    assert.throws(() => symbolFile([{ name: "runtime.main", vaddr: 1 }]), /lostwrite_/);
  });

  it("goes where bcc looks for the build id's debug file, is written again alike, and removed", () => {
    const written = writeProbeSymbols(BUILD_ID, SYMBOLS, root);
    const file = path.join(root, "87", "09f0491947faec04d9c86fe7185e8e106c5bd7.debug");
    assert.deepEqual(written, { file });
    assert.equal(debugFilePath(BUILD_ID, root), file);
    assert.deepEqual(writeProbeSymbols(BUILD_ID, SYMBOLS, root), { file });
    assert.deepEqual(readFileSync(file), symbolFile(SYMBOLS));
    removeProbeSymbols(file);
    assert.equal(existsSync(file), false);
    assert.throws(() => debugFilePath("../etc", root), /lowercase hex/);
  });

  it("leaves a debug file of the binary's own alone, and says so: its probes go at the entries", () => {
    const buildId = "aa" + BUILD_ID.slice(2);
    const file = debugFilePath(buildId, root);
    mkdirSync(path.dirname(file), { recursive: true });
    const own = Buffer.concat([Buffer.from("\x7fELF", "latin1"), Buffer.alloc(60), Buffer.from("\0main.main\0.symtab\0", "latin1")]);
    writeFileSync(file, own);
    const written = writeProbeSymbols(buildId, SYMBOLS, root);
    assert.ok("reason" in written && written.reason.includes("the binary's own debug file is left alone"), JSON.stringify(written));
    removeProbeSymbols(file);
    assert.deepEqual(readFileSync(file), own);
  });

  it("says why when the directory cannot be written", () => {
    const blocked = path.join(root, "blocked");
    writeFileSync(blocked, "a file where the directory would be");
    const written = writeProbeSymbols(BUILD_ID, SYMBOLS, blocked);
    assert.ok("reason" in written && written.reason.startsWith(`cannot write ${blocked}/87/`), JSON.stringify(written));
  });
});
