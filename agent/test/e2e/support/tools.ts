// External tools the tests run for real (promtool, prometheus, alertmanager,
// from Debian's packages). A test that cannot find its tool says exactly why
// and skips; under CI=true it fails instead, so CI never passes by skipping.
import { accessSync, constants } from "node:fs";

export interface LocatedTool {
  /** Absolute path of the executable, or null when it is not installed. */
  path: string | null;
  /** Why the tool is unusable (only meaningful when path is null). */
  reason: string;
}

const searchDirs = ["/usr/bin", "/usr/local/bin", "/bin"];

/** Finds an executable by name in the system directories Debian installs to. */
export function locateTool(name: string, installHint: string): LocatedTool {
  for (const dir of searchDirs) {
    const candidate = `${dir}/${name}`;
    try {
      accessSync(candidate, constants.X_OK);
      return { path: candidate, reason: "" };
    } catch {
      // not here; try the next directory
    }
  }
  return { path: null, reason: `${name} not found in ${searchDirs.join(", ")} (${installHint})` };
}

/**
 * The `skip` option for node:test: the reason when a tool is missing, but
 * false under CI=true, so the test runs and fails on the missing tool.
 */
export function skipUnlessCI(...tools: LocatedTool[]): string | false {
  const missing = tools.filter((t) => t.path === null).map((t) => t.reason);
  if (missing.length === 0 || process.env.CI === "true") return false;
  return missing.join("; ");
}
