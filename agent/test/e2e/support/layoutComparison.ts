// Compares what go-layout found in a binary (testbed/go-layout) with what the
// agent's Go probe program reads: the offsets of each family, the socket
// chain, and the arguments it takes from registers. Every difference is one
// line naming the family, the read, the probe's number and the binary's.
import type { GoLayoutReport, LayoutFamily, LayoutFamilyName } from "../../../../testbed/go-matrix/goLayout.ts";

/** Offsets by read ("ClientConn.tconn.data"), per family: the probe's expectations. */
export type ProbeLayouts = Partial<Record<LayoutFamilyName, Readonly<Record<string, number>>>>;

/** The probed functions, in go-layout's (and http2Families.ts's) names. */
export const PROBED_ROLES = ["encodeAndWriteHeaders", "processHeaders", "processResetStream", "processGoAway", "cleanup", "writeStreamReset"] as const;

/**
 * The arguments goProbeProgram.ts reads from Go's register ABI (AX, BX, …, in
 * parameter order), as the type each must have; "*" prefixes a family type,
 * which gets the family's package ("*ClientConn" → "*net/http.http2ClientConn").
 * Parameters after these are not read and may change freely.
 */
const PROBED_ARGUMENTS: Record<(typeof PROBED_ROLES)[number], readonly string[]> = {
  // net/http's *Request; Go 1.27's net/http/internal/http2 has its own *ClientRequest.
  encodeAndWriteHeaders: ["*clientStream", "*Request"],
  processHeaders: ["*clientConnReadLoop", "*MetaHeadersFrame"],
  processResetStream: ["*clientConnReadLoop", "*RSTStreamFrame"],
  processGoAway: ["*clientConnReadLoop", "*GoAwayFrame"],
  cleanup: ["*clientConnReadLoop"],
  // The stream id and the RST_STREAM's error code (ErrCode, a uint32 type of the family's).
  writeStreamReset: ["*ClientConn", "uint32", "ErrCode"],
};

const FAMILY_TYPE_PREFIX: Record<LayoutFamilyName, string> = {
  std: "net/http.http2",
  "x/net": "golang.org/x/net/http2.",
  internal: "net/http/internal/http2.",
};

function qualified(family: LayoutFamilyName, type: string): string {
  if (type === "*Request") return family === "internal" ? "*net/http/internal/http2.ClientRequest" : "*net/http.Request";
  if (type === "ErrCode") return `${FAMILY_TYPE_PREFIX[family]}ErrCode`;
  return type.startsWith("*") && !type.includes(".") ? `*${FAMILY_TYPE_PREFIX[family]}${type.slice(1)}` : type;
}

/** What the binary has for every read: the family's offsets and the socket chain's. */
export function readsOf(report: GoLayoutReport, family: LayoutFamily): { offsets: Record<string, number>; missing: Record<string, string> } {
  return { offsets: { ...report.socket.offsets, ...family.offsets }, missing: { ...report.socket.missing, ...family.missing } };
}

/** Every way the binary's families differ from what the probe reads; empty when the probe reads them right. */
export function differencesFromProbe(report: GoLayoutReport, expected: ProbeLayouts): string[] {
  const differences: string[] = [];
  for (const [name, family] of Object.entries(report.families) as [LayoutFamilyName, LayoutFamily][]) {
    if (family.absent.length > 0) differences.push(`${name}: lacks ${family.absent.join(", ")}`);
    const probe = expected[name];
    if (probe === undefined) {
      differences.push(`${name}: the probe program has no layout for this family`);
      continue;
    }
    const actual = readsOf(report, family);
    for (const [read, offset] of Object.entries(probe)) {
      // "*": go-layout found nothing of the kind (a binary without DWARF).
      const missing = actual.missing[read] ?? actual.missing["*"];
      if (missing !== undefined) differences.push(`${name} ${read}: probe reads +${offset}, binary: missing (${missing})`);
      else if (actual.offsets[read] !== offset) differences.push(`${name} ${read}: probe reads +${offset}, binary has +${actual.offsets[read]}`);
    }
    for (const role of PROBED_ROLES) {
      const params = family.signatures[role];
      if (params === undefined) {
        if (family.functions[role] !== undefined) differences.push(`${name} ${role}: no parameters in DWARF`);
        continue;
      }
      PROBED_ARGUMENTS[role].forEach((type, i) => {
        const want = qualified(name, type);
        const got = params[i]?.type;
        if (got !== want) differences.push(`${name} ${role}: argument ${i + 1} read as ${want}, binary has ${got ?? "none"}`);
      });
    }
  }
  return differences;
}

/** A signature as one string, "cs *T, req *U". */
export function signatureText(family: LayoutFamily, role: string): string {
  const params = family.signatures[role];
  return params === undefined ? "(not in DWARF)" : params.map((p) => `${p.name} ${p.type}`).join(", ");
}
