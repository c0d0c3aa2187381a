// The agent's version, from package.json (found above the source tree or the
// build output alike), for recordings and logs.
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

function readVersion(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    const file = path.join(dir, "package.json");
    if (existsSync(file)) return (JSON.parse(readFileSync(file, "utf8")) as { version: string }).version;
    dir = path.dirname(dir);
  }
  return "unknown";
}

export const AGENT_VERSION: string = readVersion();
