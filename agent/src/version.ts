// The agent's version, from package.json, for recordings and logs.
import { readFileSync } from "node:fs";
import path from "node:path";
import { dirAbove } from "./installPaths.ts";

function readVersion(): string {
  const dir = dirAbove("package.json");
  if (dir === null) return "unknown";
  return (JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8")) as { version: string }).version;
}

export const AGENT_VERSION: string = readVersion();
