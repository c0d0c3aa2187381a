// Request-level probing of a Go operator starts here: given the operator's
// executable, say whether its HTTP/2 client can be hooked with uprobes, and
// where. Everything needed comes from the binary itself, stripped or not:
// the ELF segments (for file offsets), the pclntab (for function entries) and
// the build info (for the Go and x/net versions). Any binary that cannot be
// hooked — not ELF, not amd64, not Go, too old, truncated, no HTTP/2 client —
// yields `{ ok: false, reason }` and never an exception, so the caller simply
// falls back to the socket-level probe and can log why.
import { readBuildInfo, type ModuleVersion } from "./buildInfo.ts";
import { openFileSource, type ByteSource } from "./byteSource.ts";
import { findSection, readElfImage, type ElfImage } from "./elfImage.ts";
import { findFunctionEntries } from "./functionEntries.ts";
import { fileOffsetOf, segmentContaining } from "./fileOffset.ts";
import { FIRST_REGISTER_ABI_MINOR, goMinorFromVersion, oldestMinorForLayout } from "./goRelease.ts";
import { layoutDifferences, layoutFromDwarf } from "./dwarfLayout.ts";
import { readDwarfTypes, type DwarfTypes } from "./dwarfTypes.ts";
import { layoutFor, type Http2Layout } from "./http2Layouts.ts";
import { allHttp2Symbols, HTTP2_FAMILY_NAMES, HTTP2_FUNCTIONS, HTTP2_SYMBOLS, type Http2FamilyName, type Http2Function } from "./http2Families.ts";
import { NotInspectable } from "./notInspectable.ts";
import { gnuBuildId } from "./probeSymbolFile.ts";
import { locatePclntab, type PclntabLocation } from "./pclntabLocation.ts";
import type { PclntabLayout } from "./pclntabHeader.ts";
import { PROLOGUE_BYTES, stackCheckBranchOffset, startsWithGoStackCheck } from "./stackCheckPrologue.ts";

export interface FunctionLocation {
  /** The pclntab name, e.g. "net/http.(*http2ClientConn).writeHeaders". */
  symbol: string;
  /** Entry address as linked (the address `go tool nm` prints). */
  vaddr: number;
  /** Offset of the entry in the file. */
  fileOffset: number;
  /**
   * What `uprobe:/path:0xOFF` takes: the branch that ends the entry's stack
   * check where bpftrace allows it, else the entry (see probePlacement).
   */
  probeOffset: number;
  /** The address of the jump that ends the entry's stack check; null when the check is not followed by one. */
  branchVaddr: number | null;
}

export interface Http2Family {
  name: Http2FamilyName;
  functions: Record<Http2Function, FunctionLocation>;
  /** Where its structs' fields are: from the binary's DWARF when it has it, else the verified table's for its Go and x/net versions (http2Layouts.ts). */
  layout: Http2Layout;
  layoutFrom: "dwarf" | "table";
  /** Where the binary's DWARF and the table disagree (the DWARF is read): a release to check in the matrix. */
  differsFromTable: string[];
}

/** A family with every function found, of a Go or x/net version whose layout is not verified: left to the socket path. */
export interface UnverifiedHttp2Family {
  name: Http2FamilyName;
  reason: string;
}

export interface IncompleteHttp2Family {
  name: Http2FamilyName;
  found: Http2Function[];
  missing: Http2Function[];
}

export interface GoBinaryInspected {
  ok: true;
  path: string;
  /** From the build info, as written ("go1.23.8"); null when the binary has none. */
  goVersion: string | null;
  /** Go 1.x minor: exact from the build info, else the oldest release the pclntab layout allows. */
  goMinor: number;
  goMinorFrom: "build info" | "pclntab layout";
  pclntabLayout: Exclude<PclntabLayout, "go1.2">;
  /** "section" when .gopclntab was there, "scan" when found by its magic in a binary without section headers. */
  pclntabFoundBy: PclntabLocation["foundBy"];
  /** golang.org/x/net as the build info lists it; null when not a dependency or no module info. */
  xNet: ModuleVersion | null;
  /** Families with every function found; never empty. */
  families: Http2Family[];
  /** Families with some but not all functions: usually a release whose code the probes do not know. */
  incompleteFamilies: IncompleteHttp2Family[];
  /** Complete families of versions outside every verified layout, or whose DWARF shows the probed parameters or fields are not where they are read. */
  unverifiedFamilies: UnverifiedHttp2Family[];
  /** Where the uprobes go: see probePlacement. */
  probePlacement: ProbePlacement;
  /** The hex GNU build id (Go 1.24+ writes one), by which a debug file naming the branches can be found; null without one. */
  buildId: string | null;
}

/**
 * "stack check branch": after the entry's stack check, on the jump the
 * kernel emulates (a cheaper uprobe; see stackCheckBranchOffset), given by
 * file offset. bpftrace 0.17 (built without offset support, as Debian ships
 * it) refuses an address inside a function it can name, so this is only
 * possible in a binary without a symbol table; with one, "entry", unless the
 * agent names each jump in a debug file of the binary ("named branch", see
 * probeSymbolFile.ts). A function whose stack check is not followed by that
 * jump is probed at its entry either way.
 */
export type ProbePlacement = "stack check branch" | "named branch" | "entry";

export interface GoBinaryRejected {
  ok: false;
  path: string;
  reason: string;
  /** Its HTTP/2 client is there, of Go or x/net versions whose layout is not verified (the others: no Go, no HTTP/2 client, unreadable). */
  unverifiedLayout?: true;
}

export type GoBinaryReport = GoBinaryInspected | GoBinaryRejected;

/** Inspects the executable at `path`; never throws. */
export async function inspectGoBinary(path: string): Promise<GoBinaryReport> {
  try {
    const source = await openFileSource(path);
    try {
      return await inspectSource(path, source);
    } finally {
      await source.close();
    }
  } catch (error) {
    return { ok: false, path, reason: rejectionReason(error), ...(error instanceof UnverifiedLayout ? { unverifiedLayout: true as const } : {}) };
  }
}

/** Every complete family's layout is unverified for the versions that built the binary. */
class UnverifiedLayout extends NotInspectable {}

/** Why inspecting failed, from what was thrown: NotInspectable as it says, fs errors as the call that failed. */
export function rejectionReason(error: unknown): string {
  if (error instanceof NotInspectable) return error.message;
  if (error instanceof RangeError) return `malformed binary: ${error.message}`;
  // fs errors (ENOENT, EACCES, EISDIR…) name the system call that failed.
  if (error instanceof Error && typeof (error as NodeJS.ErrnoException).syscall === "string") return `cannot read the binary: ${error.message}`;
  return `unexpected error inspecting the binary: ${error instanceof Error ? error.message : String(error)}`;
}

/** The inspection proper, over any ByteSource; throws NotInspectable (or RangeError on corrupt data). */
export async function inspectSource(path: string, source: ByteSource): Promise<GoBinaryReport> {
  const image = await readElfImage(source);
  // The build info first: an old release is told by its version, which names
  // the problem better than any detail of its older pclntab would.
  const buildInfo = await readBuildInfo(source, image);
  const minorFromBuildInfo = buildInfo === null ? null : goMinorFromVersion(buildInfo.goVersion);
  if (minorFromBuildInfo !== null && minorFromBuildInfo < FIRST_REGISTER_ABI_MINOR) {
    throw new NotInspectable(`built with ${buildInfo?.goVersion}: too old for the register ABI (Go 1.17+ on amd64)`);
  }
  const pclntab = await locatePclntab(source, image);
  const layout = pclntab.header.layout;
  if (minorFromBuildInfo === null && layout === "go1.16") {
    throw new NotInspectable("Go 1.16 or 1.17 pclntab and no readable Go version: cannot tell whether the register ABI is used");
  }
  const goMinor = minorFromBuildInfo ?? oldestMinorForLayout(layout);

  const entries = await findFunctionEntries(source, pclntab, allHttp2Symbols());
  const families: Http2Family[] = [];
  const incompleteFamilies: IncompleteHttp2Family[] = [];
  const unverifiedFamilies: UnverifiedHttp2Family[] = [];
  const placement: ProbePlacement = findSection(image, ".symtab") === undefined ? "stack check branch" : "entry";
  const buildId = await gnuBuildId(source, image);
  const xNet = buildInfo?.modules.get("golang.org/x/net") ?? null;
  let dwarf: DwarfTypes | null | undefined;
  for (const name of HTTP2_FAMILY_NAMES) {
    const found = HTTP2_FUNCTIONS.filter((fn) => entries.has(HTTP2_SYMBOLS[name][fn]));
    if (found.length === HTTP2_FUNCTIONS.length) {
      // Versions decide whether a family is followed at all, told by the build
      // info (never by the pclntab's guess at the oldest release); the
      // binary's own DWARF, when it has one, then says where its fields are.
      // A GOPATH-mode build (a distribution's packaging) records no module
      // versions: its x/net is followed only where its DWARF tells the layout.
      const versionless = name === "x/net" && xNet === null && minorFromBuildInfo !== null;
      const table = minorFromBuildInfo === null ? `its ${name} HTTP/2 client: no Go version in the build info to tell its layout by` : layoutFor(name, goMinor, xNet);
      if (typeof table === "string" && !versionless) {
        unverifiedFamilies.push({ name, reason: table });
        continue;
      }
      dwarf ??= await readDwarfTypes(source, image, allHttp2Symbols());
      const fromDwarf = dwarf === null ? null : layoutFromDwarf(dwarf, name);
      if (typeof fromDwarf === "string" || (fromDwarf === null && typeof table === "string")) {
        unverifiedFamilies.push({ name, reason: fromDwarf ?? `${table as string}, and no DWARF to read it from` });
        continue;
      }
      const functions = await locateFunctions(source, image, name, entries, placement);
      families.push(
        fromDwarf === null
          ? { name, functions, layout: table as Http2Layout, layoutFrom: "table", differsFromTable: [] }
          : { name, functions, layout: fromDwarf, layoutFrom: "dwarf", differsFromTable: typeof table === "string" ? [] : layoutDifferences(table, fromDwarf) },
      );
    } else if (found.length > 0) {
      incompleteFamilies.push({ name, found, missing: HTTP2_FUNCTIONS.filter((fn) => !found.includes(fn)) });
    }
  }
  if (families.length === 0) {
    if (unverifiedFamilies.length > 0) throw new UnverifiedLayout(unverifiedFamilies.map((f) => f.reason).join("; "));
    if (incompleteFamilies.length === 0) {
      throw new NotInspectable("no HTTP/2 client linked (neither net/http's http2 nor golang.org/x/net/http2)");
    }
    const missing = incompleteFamilies.map((f) => `${f.name} lacks ${f.missing.join(", ")}`).join("; ");
    throw new NotInspectable(`HTTP/2 client of an unknown layout: ${missing}`);
  }

  return {
    ok: true,
    path,
    goVersion: buildInfo?.goVersion ?? null,
    goMinor,
    goMinorFrom: minorFromBuildInfo === null ? "pclntab layout" : "build info",
    pclntabLayout: layout,
    pclntabFoundBy: pclntab.foundBy,
    xNet,
    families,
    incompleteFamilies,
    unverifiedFamilies,
    probePlacement: placement,
    buildId,
  };
}

async function locateFunctions(
  source: ByteSource,
  image: ElfImage,
  family: Http2FamilyName,
  entries: Map<string, number>,
  placement: ProbePlacement,
): Promise<Record<Http2Function, FunctionLocation>> {
  const located = {} as Record<Http2Function, FunctionLocation>;
  for (const fn of HTTP2_FUNCTIONS) {
    const symbol = HTTP2_SYMBOLS[family][fn];
    const vaddr = entries.get(symbol)!;
    const fileOffset = fileOffsetOf(image, vaddr);
    // An entry outside executable file bytes means the table does not fit the
    // file: probing there would trap on data, so reject rather than guess.
    if (fileOffset === undefined || segmentContaining(image, vaddr)?.executable !== true) {
      throw new NotInspectable(`${symbol} at 0x${vaddr.toString(16)} is not in an executable segment of the file`);
    }
    const code = await source.read(fileOffset, Math.min(PROLOGUE_BYTES, source.size - fileOffset), `code of ${symbol}`);
    if (!startsWithGoStackCheck(code)) {
      throw new NotInspectable(
        `${symbol} at 0x${vaddr.toString(16)} does not begin with Go's amd64 stack check (${code.toString("hex")}): ` +
          "refusing an address where a uprobe could land mid-instruction",
      );
    }
    const branch = stackCheckBranchOffset(code);
    located[fn] = {
      symbol,
      vaddr,
      fileOffset,
      probeOffset: fileOffset + (placement === "stack check branch" ? (branch ?? 0) : 0),
      branchVaddr: branch === null ? null : vaddr + branch,
    };
  }
  return located;
}
