// Waits while a CI run (`bash .ci/run`) holds the machine: a VM under
// software emulation takes a whole core per virtual CPU, and both would crawl.
import { execFileSync } from "node:child_process";

function ciRunning(): boolean {
  try {
    execFileSync("pgrep", ["-f", "bash .ci/run"], { stdio: "ignore" });
    return true;
  } catch {
    return false; // pgrep exits 1 when nothing matches
  }
}

export async function waitForQuietMachine(log: (line: string) => void, pollMs = 30_000): Promise<void> {
  if (!ciRunning()) return;
  log("a CI run is using the machine; waiting for it to end");
  while (ciRunning()) await new Promise((r) => setTimeout(r, pollMs));
}
