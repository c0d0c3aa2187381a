// `lostwrite probe`: the program the agent would load for this config, with
// the targets that match right now, for review or a manual bpftrace run.
import type { Config } from "./config.ts";
import { parseEndpoint } from "./sources/probe/endpointKey.ts";
import { chooseVariant, renderProgram } from "./sources/probe/probeProgram.ts";
import { newProgramsCanMatch, scanTargets } from "./sources/targets/targetRules.ts";

export async function renderProbeForConfig(config: Config): Promise<string> {
  const variant = config["probe-variant"] === "auto" ? chooseVariant() : config["probe-variant"];
  const targets = await scanTargets(
    {
      pids: config["target-pid"],
      comm: config["target-comm"] ? new RegExp(config["target-comm"]) : null,
      cmdline: config["target-cmdline"] ? new RegExp(config["target-cmdline"]) : null,
      exclude: (pid) => pid === process.pid,
    },
    config["proc-root"],
  );
  const header =
    `// Rendered by lostwrite for ${targets.size} target(s) and ${config.apiserver.length} apiserver endpoint(s).\n` +
    `// Run: bpftrace -f json <this file> 0 0   (0 0 disables the agent's control channel)\n`;
  return (
    header +
    renderProgram(variant, {
      targets: targets.keys(),
      endpoints: config.apiserver.map(parseEndpoint),
      execWatch: newProgramsCanMatch(config),
      unansweredMinBytes: config["unanswered-min-bytes"],
    })
  );
}
