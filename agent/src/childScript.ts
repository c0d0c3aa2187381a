// Work the agent hands to a short-lived Node process of its own (a Go
// binary's inspection, the kernel's BTF cut), so that what the work took is
// given back when that process exits: glibc and V8 keep what Node freed.

import path from "node:path";
import { fileURLToPath } from "node:url";

/** The script `name` beside the module at `moduleUrl` (import.meta.url): .ts when run from the source, .js when compiled (dist/). */
export function scriptBeside(moduleUrl: string, name: string): string {
  const module = fileURLToPath(moduleUrl);
  return path.join(path.dirname(module), `${name}${path.extname(module)}`);
}

/** The agent's environment without NODE_OPTIONS: a preload given to the agent (the footprint bench's) is not the child's. */
export function childEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.NODE_OPTIONS;
  return env;
}
