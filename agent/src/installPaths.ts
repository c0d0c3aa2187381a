// Files the agent ships beside its code (probes/, package.json) sit above the
// source tree (agent/src) and the build (dist/agent/src) alike: look upwards.
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** The directory above this module that holds `relative`, or null. */
export function dirAbove(relative: string): string | null {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(path.join(dir, relative))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  return null;
}
