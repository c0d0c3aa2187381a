// External tools the tests run for real: Debian's packages (bpftrace,
// python3, Prometheus 2.42 and Alertmanager 0.25) and the current Prometheus
// and Alertmanager that `npm run tools` builds. A test that cannot find its
// tool says exactly why and skips; under CI=true it fails instead, so CI never
// passes by skipping.
import { accessSync, constants, existsSync } from "node:fs";
import { MODULE_TOOLS, toolPath, type ModuleToolName } from "../../../../testbed/tools/moduleTools.ts";

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

/** A tool `npm run tools` builds into its cache (testbed/tools/moduleTools.ts). */
export function builtTool(name: ModuleToolName): LocatedTool {
  const tool = MODULE_TOOLS[name];
  const file = toolPath(tool);
  if (existsSync(file)) return { path: file, reason: "" };
  return { path: null, reason: `${tool.name} ${tool.release} not built at ${file} (npm run tools)` };
}

/** One generation of the monitoring stack a user runs the agent's dashboard and alerts on. */
export interface MonitoringGeneration {
  /** e.g. "Prometheus 3.16.0, Alertmanager 0.35.0", for test names and messages. */
  name: string;
  prometheus: LocatedTool;
  promtool: LocatedTool;
  alertmanager: LocatedTool;
  amtool: LocatedTool;
}

/** Current releases, built from their sources by `npm run tools`. */
export const CURRENT_MONITORING: MonitoringGeneration = {
  name: `Prometheus ${MODULE_TOOLS.prometheus.release}, Alertmanager ${MODULE_TOOLS.alertmanager.release}`,
  prometheus: builtTool("prometheus"),
  promtool: builtTool("promtool"),
  alertmanager: builtTool("alertmanager"),
  amtool: builtTool("amtool"),
};

/** Debian 12's packages (Prometheus 2.42, Alertmanager 0.25): the 2.x generation, still run on long-lived clusters. */
export const DEBIAN_MONITORING: MonitoringGeneration = {
  name: "Prometheus 2.42 and Alertmanager 0.25 (Debian 12)",
  prometheus: locateTool("prometheus", "apt-get install prometheus"),
  promtool: locateTool("promtool", "apt-get install prometheus"),
  alertmanager: locateTool("prometheus-alertmanager", "apt-get install prometheus-alertmanager"),
  amtool: locateTool("amtool", "apt-get install prometheus-alertmanager"),
};

/** Both generations, current first: the dashboard's queries, the alert rules and the alert's way to a webhook are tested on each. */
export const MONITORING_GENERATIONS: readonly MonitoringGeneration[] = [CURRENT_MONITORING, DEBIAN_MONITORING];
