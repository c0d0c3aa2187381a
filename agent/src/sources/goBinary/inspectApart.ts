// inspectGoBinary in a process of its own. Reading a binary's DWARF inflates
// tens of MiB (the controller-runtime manager's .debug_info), and the agent's
// Node kept 20 to 60 MiB of it for good after the inspection was over, freed
// but never given back by glibc and V8. A short-lived child does the reading
// and exits; the agent keeps only the report, which it takes as outside
// input: checked field by field, and a report it cannot read is a rejection
// that says why, as any other binary that cannot be followed.
import { spawn } from "node:child_process";
import { open, type FileHandle } from "node:fs/promises";
import { z } from "zod";
import { HTTP2_FUNCTIONS } from "./http2Families.ts";
import { rejectionReason, type GoBinaryReport } from "./inspectGoBinary.ts";
import { valueAt } from "../../valueAt.ts";
import { childEnv, scriptBeside } from "../../childScript.ts";

const CHILD_SCRIPT = scriptBeside(import.meta.url, "inspectChild");
/** A report is a few KiB; more is not a report. */
const MAX_REPORT_BYTES = 1024 * 1024;
/** The end of the child's stderr kept for the reason when it fails. */
const MAX_STDERR_BYTES = 2048;
/** The controller-runtime manager (66 MB, DWARF kept) takes under a second; a child still reading after this is stuck. */
const DEFAULT_TIMEOUT_MS = 120_000;

const offset = z.number().int().nonnegative();
const moduleVersion = z.strictObject({
  path: z.string(),
  version: z.string(),
  replacement: z.strictObject({ path: z.string(), version: z.string() }).nullable(),
});
const familyName = z.enum(["std", "internal", "x/net"]);
const functionName = z.enum(HTTP2_FUNCTIONS);
const functionLocation = z.strictObject({
  symbol: z.string(),
  vaddr: offset,
  fileOffset: offset,
  probeOffset: offset,
  branchVaddr: offset.nullable(),
});
const layout = z.strictObject({
  requestMethod: offset,
  requestUrl: offset,
  urlPath: offset,
  connTconn: offset,
  tlsConnConn: offset,
  tcpConnFd: offset,
  netFdSysfd: offset,
  readLoopConn: offset,
  streamConn: offset,
  streamId: offset,
  metaHeadersFrame: offset,
  metaFields: offset,
  frameStreamId: offset,
  fieldName: offset,
  fieldValue: offset,
  rstErrCode: offset,
  goAwayLastStreamId: offset,
  goAwayErrCode: offset,
});
const inspected = z.strictObject({
  ok: z.literal(true),
  path: z.string(),
  goVersion: z.string().nullable(),
  goMinor: z.number().int().nonnegative(),
  goMinorFrom: z.enum(["build info", "pclntab layout"]),
  pclntabLayout: z.enum(["go1.16", "go1.18", "go1.20"]),
  pclntabFoundBy: z.enum(["section", "scan"]),
  xNet: moduleVersion.nullable(),
  families: z
    .array(
      z.strictObject({
        name: familyName,
        functions: z.strictObject({
          encodeAndWriteHeaders: functionLocation,
          processHeaders: functionLocation,
          processResetStream: functionLocation,
          processGoAway: functionLocation,
          writeStreamReset: functionLocation,
          cleanup: functionLocation,
        }),
        layout,
        layoutFrom: z.enum(["dwarf", "table"]),
        differsFromTable: z.array(z.string()),
      }),
    )
    .min(1),
  incompleteFamilies: z.array(z.strictObject({ name: familyName, found: z.array(functionName), missing: z.array(functionName) })),
  unverifiedFamilies: z.array(z.strictObject({ name: familyName, reason: z.string() })),
  probePlacement: z.enum(["stack check branch", "named branch", "entry"]),
  buildId: z.string().regex(/^[0-9a-f]+$/).nullable(),
});
const rejected = z.strictObject({ ok: z.literal(false), path: z.string(), reason: z.string(), unverifiedLayout: z.literal(true).optional() });
/** Typed as the report itself: a field added to GoBinaryReport and not here fails the type check. */
const report: z.ZodType<GoBinaryReport> = z.discriminatedUnion("ok", [inspected, rejected]);

/** The inspecting process did not hand back a report: the binary is not followed, and this says why. */
function failed(binary: string, why: string): GoBinaryReport {
  return { ok: false, path: binary, reason: `unexpected error inspecting the binary: ${why}` };
}

/** Reads the child's output: one JSON report of `binary`, else a rejection naming the first field that is wrong and its value. */
export function reportFromChild(binary: string, output: string): GoBinaryReport {
  let json: unknown;
  try {
    json = JSON.parse(output);
  } catch {
    return failed(binary, `the inspecting process wrote no JSON report: ${JSON.stringify(output.slice(0, 200))}`);
  }
  const parsed = report.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const key = issue.path.join(".") || "(the report)";
    return failed(binary, `the inspecting process's report is malformed: ${key} = ${JSON.stringify(valueAt(json, issue.path))?.slice(0, 200)}: ${issue.message}`);
  }
  if (parsed.data.path !== binary) return failed(binary, `the inspecting process reported on ${JSON.stringify(parsed.data.path)}, not on this binary`);
  return parsed.data;
}

interface InspectApartOptions {
  /** The script run in the child (tests give one of their own); default inspectChild beside this module. */
  script?: string;
  timeoutMs?: number;
  /** The binary, opened already by the caller (who keeps it open after); else it is opened here. */
  handle?: FileHandle;
}

/**
 * inspectGoBinary(binary), run in a child process that exits after; never
 * throws. The binary is opened here, at once, and handed to the child as its
 * fd 3: a target's /proc/<pid>/exe is gone with the target, and a kubectl
 * lives a tenth of a second, less than a child takes to start.
 */
export async function inspectGoBinaryApart(binary: string, opts: InspectApartOptions = {}): Promise<GoBinaryReport> {
  if (opts.handle) return inspectInChild(binary, opts.handle, opts);
  let handle: FileHandle;
  try {
    handle = await open(binary, "r");
  } catch (error) {
    // As inspectGoBinary says it when it cannot open the file.
    return { ok: false, path: binary, reason: rejectionReason(error) };
  }
  try {
    return await inspectInChild(binary, handle, opts);
  } finally {
    await handle.close();
  }
}

function inspectInChild(binary: string, handle: FileHandle, opts: InspectApartOptions): Promise<GoBinaryReport> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [opts.script ?? CHILD_SCRIPT, binary], { stdio: ["ignore", "pipe", "pipe", handle.fd], env: childEnv() });
    const out: Buffer[] = [];
    let outBytes = 0;
    let err = "";
    let why: string | null = null;
    const timer = setTimeout(() => {
      why ??= `the inspecting process took more than ${(opts.timeoutMs ?? DEFAULT_TIMEOUT_MS) / 1000} s and was killed`;
      child.kill("SIGKILL");
    }, opts.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    child.stdout!.on("data", (chunk: Buffer) => {
      outBytes += chunk.length;
      if (outBytes <= MAX_REPORT_BYTES) out.push(chunk);
      else if (why === null) {
        why = `the inspecting process wrote more than ${MAX_REPORT_BYTES} bytes`;
        child.kill("SIGKILL");
      }
    });
    child.stderr!.on("data", (chunk: Buffer) => {
      err = (err + chunk.toString("utf8")).slice(-MAX_STDERR_BYTES);
    });
    child.on("error", (error) => {
      why ??= `the inspecting process could not start: ${error.message}`;
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      if (why !== null) return resolve(failed(binary, why));
      if (code !== 0) {
        const stderr = err.trim().split("\n").slice(-3).join(" | ");
        return resolve(failed(binary, `the inspecting process ${signal === null ? `exited with code ${code}` : `was killed by ${signal}`}${stderr === "" ? "" : `: ${stderr}`}`));
      }
      resolve(reportFromChild(binary, Buffer.concat(out).toString("utf8")));
    });
  });
}
