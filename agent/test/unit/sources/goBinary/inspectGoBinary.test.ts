// Go binary inspection against real binaries: HTTP/2 clients built here from
// agent/test/fixtures/go (stripped and not, PIE, without section headers),
// the system's kubectl (a stripped client-go build of a newer Go), and inputs
// that must be turned down with a reason instead of an exception. Entry
// addresses are checked against `go tool nm` on the unstripped builds; file
// offsets against the code found there (Go's stack check must start it).
import assert from "node:assert/strict";
import { closeSync, copyFileSync, existsSync, mkdtempSync, openSync, readFileSync, readSync, realpathSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { openFileSource, type ByteSource } from "../../../../src/sources/goBinary/byteSource.ts";
import { HTTP2_FUNCTIONS, HTTP2_SYMBOLS, type Http2FamilyName } from "../../../../src/sources/goBinary/http2Families.ts";
import {
  inspectGoBinary,
  inspectSource,
  type GoBinaryInspected,
  type GoBinaryReport,
} from "../../../../src/sources/goBinary/inspectGoBinary.ts";
import { startsWithGoStackCheck } from "../../../../src/sources/goBinary/stackCheckPrologue.ts";
import { buildGoFixtures, goToolNm, goUnavailable, goVersion, run, skipUnlessCi } from "./goFixtureBuilds.ts";

const STRIP = "-ldflags=-s -w";
const BUILDS = {
  std: { fixture: "std-http2-client" },
  stdStripped: { fixture: "std-http2-client", flags: [STRIP] },
  stdPie: { fixture: "std-http2-client", flags: ["-buildmode=pie", STRIP] },
  xnet: { fixture: "xnet-http2-client" },
  xnetStripped: { fixture: "xnet-http2-client", flags: [STRIP] },
  xnetPlainDwarf: { fixture: "xnet-http2-client", flags: ["-ldflags=-compressdwarf=false"] },
  hello: { fixture: "hello", flags: [STRIP] },
  hello386: { fixture: "hello", flags: [STRIP], goarch: "386" },
  helloArm64: { fixture: "hello", flags: [STRIP], goarch: "arm64" },
} as const;

const goMissing = goUnavailable();

function inspected(report: GoBinaryReport): GoBinaryInspected {
  if (!report.ok) assert.fail(`expected ${report.path} to be inspectable, got: ${report.reason}`);
  return report;
}

function family(report: GoBinaryInspected, name: Http2FamilyName) {
  const found = report.families.find((f) => f.name === name);
  assert.ok(found, `family ${name} in ${report.families.map((f) => f.name).join(", ")}`);
  return found;
}

/** Bytes of the file at `offset`: independent of the inspection's own reader. */
function bytesAt(file: string, offset: number, length: number): Buffer {
  const fd = openSync(file, "r");
  try {
    const buffer = Buffer.alloc(length);
    readSync(fd, buffer, 0, length, offset);
    return buffer;
  } finally {
    closeSync(fd);
  }
}

/**
 * Every function of every family found starts with Go's amd64 stack check at
 * its file offset, and its probe offset is that entry or, in a binary without
 * symbols, the JLS (76 r8 or 0f 86 r32) that ends the check — every function
 * of these builds has one.
 */
function assertOffsetsHitCode(file: string, report: GoBinaryInspected): void {
  for (const { functions } of report.families) {
    for (const fn of Object.values(functions)) {
      const code = bytesAt(file, fn.fileOffset, 20);
      assert.ok(startsWithGoStackCheck(code), `${fn.symbol} at file offset 0x${fn.fileOffset.toString(16)}: ${code.toString("hex")}`);
      const branch = bytesAt(file, fn.probeOffset, 2);
      if (report.probePlacement === "entry") {
        assert.equal(fn.probeOffset, fn.fileOffset, fn.symbol);
      } else {
        assert.ok([4, 9, 12, 16, 20].includes(fn.probeOffset - fn.fileOffset), `${fn.symbol}: probe ${fn.probeOffset - fn.fileOffset} bytes past the entry`);
        assert.ok(branch[0] === 0x76 || (branch[0] === 0x0f && branch[1] === 0x86), `${fn.symbol}: a JLS at the probe offset, got ${branch.toString("hex")}`);
      }
    }
  }
}

/** The families without where their probes go, which differs between a binary with symbols and without. */
const entriesOf = (report: GoBinaryInspected) =>
  report.families.map(({ layoutFrom: _, ...f }) => ({ ...f, functions: Object.values(f.functions).map(({ probeOffset: _, ...entry }) => entry) }));

/** The same file with its section headers gone from the ELF header, as sstrip leaves a binary. */
function withoutSectionHeaders(source: ByteSource): ByteSource {
  return {
    size: source.size,
    async read(offset, length, what) {
      const bytes = await source.read(offset, length, what);
      if (offset > 63) return bytes;
      const copy = Buffer.from(bytes);
      // e_shoff (40..47), e_shnum (60..61), e_shstrndx (62..63)
      for (let i = 40; i < 64; i++) if ((i < 48 || i >= 60) && i - offset >= 0 && i - offset < copy.length) copy[i - offset] = 0;
      return copy;
    },
  };
}

async function inspectWithoutSections(file: string): Promise<GoBinaryReport> {
  const source = await openFileSource(file);
  try {
    return await inspectSource(file, withoutSectionHeaders(source));
  } finally {
    await source.close();
  }
}

describe("inspectGoBinary on Go programs built here", { timeout: 240_000, skip: skipUnlessCi(goMissing) }, () => {
  let dir = "";
  let bin: Record<keyof typeof BUILDS, string>;
  let toolchain = "";

  before(async () => {
    if (goMissing !== null) assert.fail(`CI=true and ${goMissing}`);
    ({ dir, binaries: bin } = await buildGoFixtures(BUILDS));
    toolchain = await goVersion();
  });
  after(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  for (const [key, name] of [["std", "std"], ["xnet", "std"], ["xnet", "x/net"]] as const) {
    it(`finds every ${name} HTTP/2 function of ${key} at the address go tool nm gives`, async () => {
      const report = inspected(await inspectGoBinary(bin[key]));
      const nm = await goToolNm(bin[key]);
      const { functions } = family(report, name);
      for (const fn of HTTP2_FUNCTIONS) {
        assert.equal(functions[fn].symbol, HTTP2_SYMBOLS[name][fn]);
        assert.equal(functions[fn].vaddr, nm.get(functions[fn].symbol), functions[fn].symbol);
      }
    });
  }

  it("agrees between stripped and unstripped builds of the same source, and finds the pclntab by section in both", async () => {
    for (const [plain, stripped] of [["std", "stdStripped"], ["xnet", "xnetStripped"]] as const) {
      const a = inspected(await inspectGoBinary(bin[plain]));
      const b = inspected(await inspectGoBinary(bin[stripped]));
      assert.deepEqual(entriesOf(b), entriesOf(a), `${plain} vs ${stripped}`);
      assert.equal(a.pclntabFoundBy, "section");
      assert.equal(b.pclntabFoundBy, "section");
      // bpftrace refuses an address inside a function it can name: with symbols, the entry
      // (unless the agent names the jumps in a debug file, by the build id: probeSymbolFile.ts).
      assert.deepEqual([a.probePlacement, b.probePlacement], ["entry", "stack check branch"]);
      assert.match(a.buildId ?? "", /^[0-9a-f]{40}$/, "Go 1.24+ writes a GNU build id");
      for (const f of a.families) {
        for (const fn of HTTP2_FUNCTIONS) {
          const probed = family(b, f.name).functions[fn];
          assert.equal(f.functions[fn].branchVaddr, probed.vaddr + probed.probeOffset - probed.fileOffset, `${f.name} ${fn}: the jump the stripped build is probed at`);
        }
      }
      assertOffsetsHitCode(bin[plain], a);
      assertOffsetsHitCode(bin[stripped], b);
      // The same layout either way: read from the DWARF -s -w removes, and from the verified table.
      assert.deepEqual(a.families.map((f) => [f.name, f.layoutFrom, f.differsFromTable]), a.families.map((f) => [f.name, "dwarf", []]));
      assert.deepEqual(b.families.map((f) => f.layoutFrom), b.families.map(() => "table"));
    }
  });

  it("reads the layout from DWARF left uncompressed as from the zlib-compressed default", async () => {
    const plain = inspected(await inspectGoBinary(bin.xnetPlainDwarf));
    const compressed = inspected(await inspectGoBinary(bin.xnet));
    assert.deepEqual(plain.families.map((f) => [f.name, f.layoutFrom, f.layout]), compressed.families.map((f) => [f.name, "dwarf", f.layout]));
  });

  it("reports the Go version and layout of the toolchain, and which x/net a program uses", async () => {
    const std = inspected(await inspectGoBinary(bin.stdStripped));
    assert.equal(std.goVersion, toolchain);
    assert.equal(std.goMinorFrom, "build info");
    assert.equal(std.goMinor, Number(/^go1\.(\d+)/.exec(toolchain)?.[1]));
    assert.equal(std.pclntabLayout, std.goMinor >= 20 ? "go1.20" : "go1.18");
    assert.deepEqual(std.families.map((f) => f.name), ["std"], "plain net/http links only the bundle");
    assert.equal(std.xNet, null);

    const xnet = inspected(await inspectGoBinary(bin.xnetStripped));
    assert.deepEqual(xnet.families.map((f) => f.name), ["std", "x/net"], "x/net programs link the bundle too, through net/http");
    assert.equal(xnet.xNet?.path, "golang.org/x/net");
    assert.equal(xnet.xNet?.version, /require golang.org\/x\/net (v\S+)/.exec(readFileSync(path.join(dir, "src/xnetStripped/go.mod"), "utf8"))?.[1]);
    assert.equal(xnet.xNet?.replacement ?? null, null, "built from the module as go.sum pins it, not a replacement");
    assert.deepEqual(xnet.incompleteFamilies, []);
  });

  it("reads a position-independent build, whose pclntab is .data.rel.ro.gopclntab in a writable segment", async () => {
    const pie = inspected(await inspectGoBinary(bin.stdPie));
    const nm = await goToolNm(bin.std);
    assert.equal(pie.pclntabFoundBy, "section");
    assert.equal(pie.goVersion, toolchain);
    assertOffsetsHitCode(bin.stdPie, pie);
    // A PIE build is linked at other addresses: compare the code, not the numbers.
    const encodeAndWriteHeaders = family(pie, "std").functions.encodeAndWriteHeaders;
    assert.notEqual(encodeAndWriteHeaders.vaddr, 0);
    assert.ok(nm.has(encodeAndWriteHeaders.symbol));
  });

  it("finds the pclntab and the build info by scanning the segments when section headers are gone", async () => {
    for (const key of ["stdStripped", "xnetStripped", "stdPie"] as const) {
      const withSections = inspected(await inspectGoBinary(bin[key]));
      const scanned = inspected(await inspectWithoutSections(bin[key]));
      assert.equal(scanned.pclntabFoundBy, "scan", key);
      // The build id is found by its section, as bcc finds it: without section headers, no debug file names probe points.
      assert.equal(scanned.buildId, null, key);
      assert.deepEqual({ ...scanned, pclntabFoundBy: "section", buildId: withSections.buildId }, withSections, key);
    }
  });

  it("turns down binaries that cannot be probed, each with its reason", async () => {
    const cases: [string, string, RegExp][] = [
      ["hello world", bin.hello, /^no HTTP\/2 client linked/],
      ["386", bin.hello386, /^32-bit ELF/],
      ["arm64", bin.helloArm64, /^arm64 binary: only amd64/],
    ];
    // No big-endian amd64 exists; a header that says so stands in for ppc64/s390x.
    const bigEndian = path.join(dir, "big-endian");
    writeFileSync(bigEndian, Buffer.concat([readFileSync(bin.hello).subarray(0, 5), Buffer.from([2]), readFileSync(bin.hello).subarray(6)]));
    cases.push(["big-endian", bigEndian, /^big-endian ELF/]);
    for (const [what, file, reason] of cases) {
      const report = await inspectGoBinary(file);
      assert.equal(report.ok, false, what);
      assert.match(report.ok ? "" : report.reason, reason, what);
    }
  });

  it("turns down truncated copies of a Go binary, wherever they are cut", async () => {
    const whole = readFileSync(bin.stdStripped).length;
    const cuts = [0, 3, 40, 64, 100, 300, 5000, Math.floor(whole / 3), Math.floor(whole / 2), Math.floor(whole * 0.9), whole - 20_000];
    for (const cut of cuts) {
      const copy = path.join(dir, `truncated-${cut}`);
      copyFileSync(bin.stdStripped, copy);
      truncateSync(copy, cut);
      const report = await inspectGoBinary(copy);
      assert.equal(report.ok, false, `cut at ${cut}`);
      assert.match(report.ok ? "" : report.reason, /^(truncated file|not an ELF file)/, `cut at ${cut}`);
    }
  });
});

describe("inspectGoBinary on files that are not Go programs", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-notgo-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("names what is wrong: text, a C program, a directory, nothing at all", async () => {
    writeFileSync(path.join(dir, "notes.txt"), "operator release notes\n".repeat(100));
    writeFileSync(path.join(dir, "empty"), "");
    const cases: [string, RegExp][] = [
      [path.join(dir, "notes.txt"), /^not an ELF file/],
      [path.join(dir, "empty"), /^not an ELF file/],
      [dir, /is not a regular file$/],
      [path.join(dir, "missing"), /^cannot read the binary: ENOENT/],
    ];
    if (existsSync("/bin/ls")) cases.push([realpathSync("/bin/ls"), /^not a Go binary/]);
    for (const [file, reason] of cases) {
      const report = await inspectGoBinary(file);
      assert.equal(report.ok, false, file);
      assert.match(report.ok ? "" : report.reason, reason, file);
    }
  });
});

// The operator case: a stripped client-go binary built by a newer Go than the
// local one (kubectl 1.33: Go 1.23, x/net 0.30), so the Go ≥ 1.20 pclntab.
const KUBECTL = "/usr/bin/kubectl";
const kubectlMissing = existsSync(KUBECTL) ? goMissing : `${KUBECTL} not found`;

describe("inspectGoBinary on kubectl", { timeout: 60_000, skip: skipUnlessCi(kubectlMissing) }, () => {
  it("finds both HTTP/2 families, and the Go and x/net versions go version -m reports", async () => {
    if (kubectlMissing !== null) assert.fail(`CI=true and ${kubectlMissing}`);
    const file = realpathSync(KUBECTL);
    const report = inspected(await inspectGoBinary(file));
    const listing = await run("go", ["version", "-m", file]);
    assert.equal(report.goVersion, /^\S+: (\S+)/.exec(listing)?.[1]);
    assert.equal(report.xNet?.version, /\bdep\s+golang\.org\/x\/net\s+(\S+)/.exec(listing)?.[1]);
    assert.equal(report.pclntabLayout, report.goMinor >= 20 ? "go1.20" : "go1.18");
    assert.deepEqual(report.families.map((f) => f.name), ["std", "x/net"]);
    assert.equal(report.probePlacement, "stack check branch");
    assertOffsetsHitCode(file, report);

    const scanned = inspected(await inspectWithoutSections(file));
    assert.deepEqual({ ...scanned, pclntabFoundBy: "section" }, report);
  });
});
