// The printf line table (probeLines.ts) against everything else that states a
// probe line's layout: the record types the rest of the agent reads, every
// printf("…") of every probes/*.bt (IPv4 and IPv6 variants alike; the TLS
// template as rendered), and the OUTPUT section and samples of every probe's
// header comment. No root: the .bt files are read as text.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { headerName, PRINTF_CONVERSIONS, PROBE_FAMILIES, PROBE_LINES, SOCKETS_VARIANT_ONLY, type FieldType, type PrintfKind, type PrintfRecord } from "../../../../src/sources/probe/probeLines.ts";
import { parseProbeLine } from "../../../../src/sources/probe/probeOutput.ts";
import { HTTP2_LAYOUTS } from "../../../../src/sources/goBinary/http2Layouts.ts";
import { HTTP2_FAMILY_NAMES, HTTP2_FUNCTIONS, HTTP2_SYMBOLS, type Http2Function } from "../../../../src/sources/goBinary/http2Families.ts";
import { renderGoProgram } from "../../../../src/sources/goHttp2/goProbeProgram.ts";
import { KERNEL_OFFSETS } from "../../../kernelOffsets.ts";
import { probeSymbolName } from "../../../../src/sources/goBinary/probeSymbolFile.ts";
import { renderTlsProgram, TLS_ANSWER_MIN_BYTES } from "../../../../src/sources/tls/tlsProbeProgram.ts";
import { repoPath } from "../../../repoPath.ts";

const probesDir = repoPath("probes");
const PROBES = readdirSync(probesDir)
  .filter((name) => name.endsWith(".bt"))
  .sort()
  .map((name) => ({ name, text: readFileSync(path.join(probesDir, name), "utf8") }));
const KINDS = Object.keys(PROBE_LINES) as PrintfKind[];
const SOCKET_KINDS = Object.keys(PROBE_FAMILIES.sockets) as PrintfKind[];
const fieldsOf = (kind: PrintfKind): [string, FieldType][] => Object.entries(PROBE_LINES[kind]);

// The printf records as the agent read them before the table existed, written
// out: the derived types must stay exactly these (same keys, same types, none
// readonly or optional), so that nothing downstream changes.
type Expected =
  | { type: "hello"; ts: bigint; agentPid: number }
  | { type: "send"; ts: bigint; pid: number; tid: number; syscallNr: number; ret: number; port: number; addr: string; sk: bigint; comm: string }
  | { type: "connect"; ts: bigint; pid: number; tid: number; err: number; port: number; addr: string; comm: string }
  | {
      type: "close";
      ts: bigint;
      pid: number;
      tid: number;
      err: number;
      reset: boolean;
      closedBy: number;
      unansweredBytes: number;
      waitedNs: bigint;
      retransmits: number;
      port: number;
      addr: string;
      sk: bigint;
      comm: string;
    }
  | { type: "exec"; ts: bigint; pid: number; cgroup: bigint; comm: string }
  | { type: "ambiguous"; ts: bigint; pid: number; sk: bigint; bytes: number; waitedNs: bigint }
  | { type: "ack"; seq: number }
  | { type: "adopted"; ts: bigint; pid: number; sk: bigint }
  | { type: "tick"; ts: bigint }
  | { type: "beat"; ts: bigint }
  | { type: "follow"; ts: bigint; pid: number; since: bigint }
  | { type: "unfollow"; ts: bigint; pid: number }
  | { type: "go_request"; ts: bigint; pid: number; tid: number; conn: bigint; stream: bigint; streamId: number; pathLen: number; pathNow: number; method: string; port: number; addr: string }
  | { type: "go_path"; pid: number; stream: bigint; offset: number; part: string }
  | { type: "go_peer"; ts: bigint; pid: number; port: number; addr: string }
  | { type: "go_sent"; ts: bigint; pid: number; sent: bigint }
  | { type: "go_status"; ts: bigint; pid: number; conn: bigint; streamId: number; status: number }
  | { type: "go_reset"; ts: bigint; pid: number; conn: bigint; streamId: number; code: number }
  | { type: "go_goaway"; ts: bigint; pid: number; conn: bigint; lastStreamId: number; code: number }
  | { type: "go_conn_sk"; ts: bigint; pid: number; conn: bigint; sk: bigint; task: bigint }
  | { type: "go_conn_closed"; ts: bigint; pid: number; conn: bigint; state: number; port: number; addr: string }
  | { type: "go_abort"; ts: bigint; pid: number; tid: number; conn: bigint; streamId: number; code: number }
  | { type: "tls_close"; ts: bigint; pid: number; sk: bigint; unansweredBytes: number; waitedNs: bigint; peerClosed: boolean };
type Flat<T> = T extends unknown ? { [K in keyof T]: T[K] } : never;
type Same<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const recordTypesUnchanged: Same<Flat<PrintfRecord>, Flat<Expected>> = true;

/**
 * Known disagreements between a probe's printf and the table, as
 * "file kind field conversion". Each is a bug in the probe, listed so that CI
 * stays green until the probe is fixed; the test fails when one is fixed and
 * still listed. (close's WAITED_NS was one: %d, which bpftrace 0.17 cuts to
 * 32 bits, so a 5 s wait printed as 705032704.)
 */
const KNOWN_MISMATCHES = new Set<string>();

/** Every printf format string of a program, its comments left out. */
function printfFormats(text: string): string[] {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");
  return [...code.matchAll(/printf\("((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]!);
}

/** The header comment's OUTPUT section, up to its sample: one line per kind, with the field names it lists. */
function headerOutputKinds(text: string): Map<string, string[]> {
  const header = text.slice(text.indexOf("/*"), text.indexOf("*/"));
  const lines = header.split("\n");
  const start = lines.findIndex((line) => /^ \* OUTPUT\b/.test(line));
  assert.ok(start >= 0, "no OUTPUT section in the header comment");
  const end = lines.findIndex((line, i) => i > start && /^ \* (Sample\b|[A-Z][A-Z ]+\. )/.test(line));
  const kinds = new Map<string, string[]>();
  for (const line of lines.slice(start, end)) {
    const m = /^ \* {3}([a-z_]+) +(.*)$/.exec(line);
    if (!m) continue;
    const names = m[2]!.split(/\s+/);
    const upper = names.findIndex((word) => !/^[A-Z][A-Z0-9_]*$/.test(word));
    kinds.set(m[1]!, upper === -1 ? names : names.slice(0, upper));
  }
  return kinds;
}

/** What is wrong with the printfs of a program: kinds outside the table or `kinds`, conversions that disagree, kinds never printed. */
function printfProblems(programName: string, text: string, kinds: PrintfKind[]): string[] {
  const formats = printfFormats(text);
  const problems: string[] = [];
  const mismatches = new Set<string>();
  for (const format of formats) {
    const [kind, ...conversions] = format.replace(/\\n$/, "").split(" ") as [string, ...string[]];
    if (!kinds.includes(kind as PrintfKind)) {
      problems.push(`printf("${format}"): kind "${kind}" is not in this family's table`);
      continue;
    }
    const fields = fieldsOf(kind as PrintfKind);
    const layout = fields.map(([key, type]) => `${key}:${type}`).join(" ");
    if (conversions.length !== fields.length) {
      problems.push(`printf("${format}"): ${conversions.length} conversions for the ${fields.length} fields ${layout}`);
      continue;
    }
    for (const [i, [key, type]] of fields.entries()) {
      const conversion = conversions[i]!;
      if (PRINTF_CONVERSIONS[type].includes(conversion)) continue;
      const mismatch = `${programName} ${kind} ${key} ${conversion}`;
      if (KNOWN_MISMATCHES.has(mismatch)) mismatches.add(mismatch);
      else problems.push(`printf("${format}"): ${key} (${type}) printed with ${conversion}, expected ${PRINTF_CONVERSIONS[type].join(" or ")}`);
    }
  }
  const printed = new Set(formats.map((format) => format.split(" ")[0]));
  for (const kind of kinds) if (!printed.has(kind)) problems.push(`no printf of kind "${kind}"`);
  for (const known of KNOWN_MISMATCHES) {
    if (known.startsWith(`${programName} `) && !mismatches.has(known)) problems.push(`"${known}" is fixed: remove it from KNOWN_MISMATCHES`);
  }
  return problems;
}

void describe("the printf line table", () => {
  void it("derives exactly the record types the agent has always read", () => {
    assert.equal(recordTypesUnchanged, true);
  });

  void it("reads a Go program's IPv6 peer, printed as two little-endian words in hex, as the text ntop prints", () => {
    const peer = (addr: string): unknown => {
      const result = parseProbeLine(JSON.stringify({ type: "printf", data: `go_peer 1 42 6443 ${addr}\n` }));
      return result.ok && result.record.type === "go_peer" ? result.record.addr : result;
    };
    // The bytes of fd00::1 are fd 00 … 00 01: the first word's lowest byte is fd, the second's highest 01.
    assert.equal(peer("00000000000000fd0100000000000000"), "fd00::1");
    assert.equal(peer("00000000000000000100000000000000"), "::1");
    assert.equal(peer("00000000000000000100007fffff0000"), "::ffff:127.0.0.1");
    assert.equal(peer("00000000b80d01200000010000000000"), "2001:db8::1:0");
    // What ntop printed passes as it is.
    assert.equal(peer("127.0.0.1"), "127.0.0.1");
    assert.equal(peer("fd00::1"), "fd00::1");
  });

  void it("has a rest-of-line field only last, and distinct header names", () => {
    for (const kind of KINDS) {
      const fields = fieldsOf(kind);
      const rest = fields.findIndex(([, type]) => type === "rest");
      assert.ok(rest === -1 || rest === fields.length - 1, `${kind}: the rest of the line must be the last field`);
      const names = fields.map(([key]) => headerName(key));
      assert.equal(new Set(names).size, names.length, `${kind}: two fields with one header name: ${names.join(" ")}`);
    }
  });

  void it("parses a line built from the table into a record with every field", () => {
    const sample: Record<FieldType, string> = { int: "-7", u64: "18446744073709551615", bool: "1", word: "::1", address: "00000000000000fd0100000000000000", rest: "my op" };
    const value: Record<FieldType, unknown> = { int: -7, u64: 18446744073709551615n, bool: true, word: "::1", address: "fd00::1", rest: "my op" };
    for (const kind of KINDS) {
      const fields = fieldsOf(kind);
      const line = [kind, ...fields.map(([, type]) => sample[type])].join(" ");
      const result = parseProbeLine(JSON.stringify({ type: "printf", data: `${line}\n` }));
      assert.ok(result.ok, `${line}: ${result.ok ? "" : result.error}`);
      // Keys in the table's order too: records are serialised (--record, logs).
      assert.deepEqual(Object.keys(result.record), ["type", ...fields.map(([key]) => key)]);
      assert.deepEqual(result.record, Object.fromEntries([["type", kind], ...fields.map(([key, type]) => [key, value[type]])]));
      const short = [kind, ...fields.slice(0, -1).map(([, type]) => sample[type])].join(" ");
      assert.equal(parseProbeLine(JSON.stringify({ type: "printf", data: short })).ok, false, `${short}: a field missing`);
      if (fields.at(-1)?.[1] !== "rest") {
        const long = `${line} 1`;
        assert.equal(parseProbeLine(JSON.stringify({ type: "printf", data: long })).ok, false, `${long}: a field too many`);
      }
    }
  });
});

/** The TLS program's template, checked through what it renders to: BEGIN, the tick and the follow lines come from the part every uprobe program shares. */
const TLS_TEMPLATE = "tls_answers.bt";
const renderedTls = (): string => renderTlsProgram({ library: "/proc/1/fd/3", programId: 0, pids: [42], execWatch: false });

/** The Go program's template, likewise: every function's section rendered for every family, at offsets past the entry as in a binary without symbols. */
const GO_TEMPLATE = "go_http2.bt";
const goLocation = (symbol: string, at: number) => ({ symbol, vaddr: 0x400000 + at, fileOffset: at, probeOffset: at + 4, branchVaddr: 0x400000 + at + 4 });
const goFamilies = HTTP2_FAMILY_NAMES.map((name, f) => ({
  name,
  layout: HTTP2_LAYOUTS.find((row) => row.family === name)!.layout,
  functions: Object.fromEntries(HTTP2_FUNCTIONS.map((fn, i) => [fn, goLocation(HTTP2_SYMBOLS[name][fn], 0x1000 * (f + 1) + 0x10 * i)])) as Record<Http2Function, ReturnType<typeof goLocation>>,
}));
const renderedGo = (): string => renderGoProgram({ binary: "/proc/9/fd/12", families: goFamilies, programId: 3, pids: [42, 7], execWatch: true, kernelOffsets: KERNEL_OFFSETS });

for (const probe of PROBES) {
  const kinds =
    probe.name === TLS_TEMPLATE
      ? (Object.keys(PROBE_FAMILIES.tls) as PrintfKind[])
      : probe.name === GO_TEMPLATE
        ? (Object.keys(PROBE_FAMILIES.goHttp2) as PrintfKind[])
        : probe.name === "apiserver_sockets.bt"
          ? SOCKET_KINDS
          : SOCKET_KINDS.filter((kind) => !SOCKETS_VARIANT_ONLY.includes(kind));
  const program = probe.name === TLS_TEMPLATE ? renderedTls() : probe.name === GO_TEMPLATE ? renderedGo() : probe.text;
  void describe(`probes/${probe.name}`, () => {
    void it("prints every kind of the table, each printf with one conversion per field in the table's order and type", () => {
      assert.deepEqual(printfProblems(probe.name, program, kinds), []);
    });

    void it("lists every kind in its header's OUTPUT section with the table's fields", () => {
      const listed = headerOutputKinds(probe.text);
      assert.deepEqual([...listed.keys()].sort(), [...kinds].sort(), "the kinds the OUTPUT section lists");
      for (const kind of kinds) {
        const names = fieldsOf(kind).map(([key]) => headerName(key));
        assert.equal(listed.get(kind)?.join(" "), names.join(" "), `the fields of "${kind}" in the OUTPUT section`);
      }
    });

    void it("has header samples the parser reads", () => {
      const samples = [...probe.text.matchAll(/^ \* {3}(\{"type": "printf".*\})$/gm)].map((m) => m[1]!);
      assert.ok(samples.length > 0, "no sample lines in the header");
      for (const sample of samples) {
        const result = parseProbeLine(sample);
        assert.ok(result.ok, `${sample}: ${result.ok ? "" : result.error}`);
      }
    });
  });
}

void describe("the generated Go HTTP/2 program", () => {
  const GO_KINDS = Object.keys(PROBE_FAMILIES.goHttp2) as PrintfKind[];
  // Probed past the entry, as in a binary without symbols: the program must use the probe offset.
  const families = goFamilies;
  const text = renderedGo();

  void it("prints every kind of the Go family, each printf with the table's fields", () => {
    assert.deepEqual(printfProblems("go-http2", text, GO_KINDS), []);
  });

  void it("attaches every function of every family at its probe offset, reporting for the followed pids only", () => {
    const probes = [...text.matchAll(/^uprobe:(\S+):0x([0-9a-f]+) \/(.*)\/ \{$/gm)];
    assert.equal(probes.length, HTTP2_FAMILY_NAMES.length * HTTP2_FUNCTIONS.length);
    const offsets = new Set(families.flatMap((f) => Object.values(f.functions).map((l) => l.probeOffset)));
    for (const [, binary, offset, filter] of probes) {
      assert.equal(binary, "/proc/9/fd/12");
      assert.ok(offsets.has(parseInt(offset!, 16)), `offset 0x${offset}`);
      assert.equal(filter, "@lw_pids[pid]");
    }
    assert.doesNotMatch(text, /uretprobe/, "never a return probe on Go code");
  });

  void it("reads each family's request at its layout's offsets: Go 1.27's ClientRequest has a Context before Method and URL", () => {
    const methodReads = [...text.matchAll(/\$method = \*uptr\(\$req \+ (\d+)\);\n.*\n\t*\$url = \*uptr\(\$req \+ (\d+)\);/g)].map((m) => `${m[1]}/${m[2]}`);
    // Where each request goes out, and where five probes print a request the kernel kept.
    assert.deepEqual(methodReads, HTTP2_FAMILY_NAMES.flatMap((name) => Array<string>(6).fill(name === "internal" ? "16/32" : "0/16")));
  });

  void it("in a binary with a symbol table, attaches at each function's address, which bpftrace looks up there", () => {
    // At entries, as in a binary with symbols, and past 0x401000: a file offset bpftrace would take for an address in another function.
    const atEntry = (symbol: string, at: number) => ({ symbol, vaddr: 0x400000 + at, fileOffset: at, probeOffset: at, branchVaddr: 0x400000 + at + 4 });
    const large = HTTP2_FAMILY_NAMES.map((name, f) => ({
      name,
      layout: HTTP2_LAYOUTS.find((row) => row.family === name)!.layout,
      functions: Object.fromEntries(HTTP2_FUNCTIONS.map((fn, i) => [fn, atEntry(HTTP2_SYMBOLS[name][fn], 0x500000 * (f + 1) + 0x10 * i)])) as Record<Http2Function, ReturnType<typeof atEntry>>,
    }));
    const withSymbols = renderGoProgram({ binary: "/proc/9/fd/12", families: large, probePlacement: "entry", programId: 3, pids: [42], execWatch: false, kernelOffsets: KERNEL_OFFSETS });
    const attached = [...withSymbols.matchAll(/^uprobe:\S+:0x([0-9a-f]+) /gm)].map((m) => parseInt(m[1]!, 16));
    assert.deepEqual(attached, large.flatMap((f) => HTTP2_FUNCTIONS.map((fn) => f.functions[fn].vaddr)));
  });

  void it("with the jumps named in a debug file, attaches by those names, and at the address where a function has no jump", () => {
    const named = goFamilies.map((family) => ({ ...family, functions: { ...family.functions, cleanup: { ...family.functions.cleanup, branchVaddr: null } } }));
    const program = renderGoProgram({ binary: "/proc/9/fd/12", families: named, probePlacement: "named branch", programId: 3, pids: [42], execWatch: false, kernelOffsets: KERNEL_OFFSETS });
    const attached = [...program.matchAll(/^uprobe:\S+:(\S+) /gm)].map((m) => m[1]!);
    assert.deepEqual(
      attached,
      named.flatMap((f) => HTTP2_FUNCTIONS.map((fn) => (fn === "cleanup" ? `0x${f.functions.cleanup.vaddr.toString(16)}` : probeSymbolName(f.name, fn)))),
    );
  });

  void it("keys what it keeps between probes by pid too: two processes of one binary share heap addresses", () => {
    const uses = [...text.matchAll(/@go_\w+\[([^\]]*)\]/g)];
    assert.ok(uses.length >= 6, `the program keeps state: ${uses.length} uses`);
    // $target: the pid a follow message lets go (its per-process entries deleted).
    for (const [use, key] of uses) assert.match(key!, /^(pid|\$target)(, |$)/, use);
    assert.ok(uses.some(([, key]) => key === "$target"), "a process let go while it runs has its entries deleted");
  });

  void it("refuses targets it cannot express, naming the value", () => {
    const follow = { programId: 0, pids: [1], execWatch: false, kernelOffsets: KERNEL_OFFSETS };
    assert.throws(() => renderGoProgram({ binary: "/x", families, ...follow, pids: [-1] }), /positive integer, got -1/);
    assert.throws(() => renderGoProgram({ binary: "/x", families, ...follow, programId: 255 }), /program id: expected 0…254, got 255/);
    assert.throws(() => renderGoProgram({ binary: '/a "b', families, ...follow }), /quotes or spaces: "\/a "b"/);
    assert.throws(() => renderGoProgram({ binary: "/x", families: [], ...follow }), /no HTTP\/2 family/);
    assert.throws(() => renderGoProgram({ binary: "/x", families, ...follow, correlationWindowMs: -1 }), /correlationWindowMs: expected a duration in ms, got -1/);
    const withoutSk = Object.fromEntries(Object.entries(KERNEL_OFFSETS).filter(([field]) => field !== "socket.sk"));
    assert.throws(() => renderGoProgram({ binary: "/x", families, ...follow, kernelOffsets: withoutSk }), /the kernel's offset of socket\.sk is not known/);
    const early = families.map((f) => ({ ...f, layout: { ...f.layout, rstErrCode: 2 } }));
    assert.throws(() => renderGoProgram({ binary: "/x", families: early, ...follow }), /rstErrCode at byte 2; a 4-byte field is read from the 4 bytes before it/);
  });

  void it("names no type in a uprobe (no cast, no field read through a pointer, no args), so bpftrace never loads the binary's DWARF", () => {
    const uprobes = [...text.matchAll(/^uprobe:[^\n]*\{\n[\s\S]*?^\}$/gm)].map((m) => m[0]);
    assert.equal(uprobes.length, HTTP2_FAMILY_NAMES.length * HTTP2_FUNCTIONS.length);
    for (const probe of uprobes) {
      assert.doesNotMatch(probe, /\((?:struct|union|enum)\s+\w+|\((?:u?int(?:8|16|32|64)|char|void)\b[\s*]*\)/, "a cast");
      assert.doesNotMatch(probe, /->|\bargs\b/, "a field read through a pointer, or args");
      assert.doesNotMatch(probe, /offsetof/, "every offsetof replaced by the kernel's offset");
    }
  });

  void it("reads the kernel's socket at the running kernel's offsets", () => {
    const other = { ...KERNEL_OFFSETS, "socket.sk": 9999, "task_struct.files": 7777 };
    const program = renderGoProgram({ binary: "/x", families, programId: 0, pids: [1], execWatch: false, kernelOffsets: other });
    assert.match(program, /\$sk = \*kptr\(\*kptr\(\$file \+ 24\) \+ 9999\);/);
    assert.match(program, /\*kptr\(\$task \+ 7777\)/);
  });

  void it("prints a process's 2xx answers with their paths for the correlation window and its margin after a rejection, no longer", () => {
    const program = renderGoProgram({ binary: "/x", families, programId: 0, pids: [1], execWatch: false, correlationWindowMs: 2000, kernelOffsets: KERNEL_OFFSETS });
    assert.match(program, /nsecs - @go_rejected\[pid\] < 12000000000\)/);
  });
});

void describe("the generated TLS program", () => {
  const TLS_KINDS = Object.keys(PROBE_FAMILIES.tls) as PrintfKind[];
  const library = "/host/proc/42/root/usr/lib/x86_64-linux-gnu/libssl.so.3";
  const text = renderTlsProgram({ library, programId: 4, pids: [42, 7], execWatch: false });

  void it("prints every kind of the TLS family, each printf with the table's fields", () => {
    assert.deepEqual(printfProblems("tls", text, TLS_KINDS), []);
  });

  void it("probes OpenSSL's read, write and handshake in that file, and every process-context probe for the followed pids only", () => {
    const uprobes = [...text.matchAll(/^(uprobe|uretprobe):(\S+):(\w+) \/(.*)\/ \{$/gm)];
    assert.deepEqual(uprobes.map(([, kind, , fn]) => `${kind} ${fn}`).sort(), [
      "uprobe SSL_do_handshake", "uprobe SSL_free", "uprobe SSL_get_error", "uprobe SSL_read", "uprobe SSL_read_ex", "uprobe SSL_write", "uprobe SSL_write_ex",
      "uretprobe SSL_get_error", "uretprobe SSL_read", "uretprobe SSL_read_ex", "uretprobe SSL_write", "uretprobe SSL_write_ex",
    ]);
    for (const [, , file, , filter] of uprobes) {
      assert.equal(file, library);
      assert.equal(filter, "@lw_pids[pid]");
    }
    assert.match(text, /^tracepoint:sock:sock_send_length \/@lw_pids\[pid\]\/ \{$/m, "sockets are learned from the followed pids' sends only");
    assert.match(text, /^tracepoint:sock:inet_sock_set_state \{$/m, "a close is seen in any context: a reset comes in softirq");
  });

  void it("keys per-process state by pid too: two processes of one library share heap addresses", () => {
    const uses = [...text.matchAll(/@tls_(cur|rd|rdn|wr|wrn|ge|sk)\[([^\]]*)\]/g)];
    assert.ok(uses.length >= 10, `the program keeps state: ${uses.length} uses`);
    for (const [use, , key] of uses) assert.match(key!, /^pid, /, use);
  });

  void it("takes only a read of at least TLS_ANSWER_MIN_BYTES for an answer", () => {
    assert.equal([...text.matchAll(new RegExp(`if \\(\\$n >= ${TLS_ANSWER_MIN_BYTES}\\)`, "g"))].length, 2, "SSL_read and SSL_read_ex");
  });

  void it("refuses targets it cannot express, naming the value", () => {
    const follow = { programId: 0, pids: [1], execWatch: false };
    assert.throws(() => renderTlsProgram({ library, ...follow, pids: [0] }), /positive integer, got 0/);
    assert.throws(() => renderTlsProgram({ library: "/a b", ...follow }), /quotes, spaces or colons: "\/a b"/);
  });
});
