// `lostwrite doctor --binary PATH`: whether an operator binary's requests
// would be followed one by one, in one line a user can act on. The same
// inspection the agent runs on every Go target (goBinary/inspectGoBinary.ts).
import { inspectGoBinary, type GoBinaryReport } from "./sources/goBinary/inspectGoBinary.ts";

/** One line: "covered: …" or "not covered: …", and whether it is covered. */
function coverageLine(report: GoBinaryReport): { covered: boolean; line: string } {
  if (!report.ok) {
    const what = report.unverifiedLayout ? "socket path only, until its versions are verified" : "socket path only";
    return { covered: false, line: `not covered (${what}): ${report.path}: ${report.reason}` };
  }
  const built = [report.goVersion ?? `Go 1.${report.goMinor} or later (no build info)`, report.xNet ? `golang.org/x/net ${report.xNet.version}` : null].filter(Boolean).join(", ");
  const families = report.families.map((f) => `${f.name}, layout from ${f.layoutFrom === "dwarf" ? "its DWARF" : "the verified table"}`).join("; ");
  const left = report.unverifiedFamilies.length > 0 ? `; not followed: ${report.unverifiedFamilies.map((f) => f.reason).join("; ")}` : "";
  // With symbols and a build id the agent names the jumps in a debug file, where it can write one (probeSymbolFile.ts).
  const where = report.probePlacement === "entry" && report.buildId !== null ? "named branch (entry where its debug file cannot be written)" : report.probePlacement;
  return { covered: true, line: `covered: ${report.path} (${built}): requests followed (HTTP/2 client families: ${families}), uprobes at ${where}${left}` };
}

/** Prints the line; exit code 0 when covered, 1 when not. */
export async function runBinaryCoverage(path: string, out: NodeJS.WritableStream): Promise<number> {
  const { covered, line } = coverageLine(await inspectGoBinary(path));
  out.write(`${line}\n`);
  return covered ? 0 : 1;
}
