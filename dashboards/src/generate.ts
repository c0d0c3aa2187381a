// Writes the Grafana JSON of every dashboard from its code in dashboards/src.
//
//   npm run dashboards              rewrite the JSON files
//   npm run dashboards -- --check   exit 1 when a committed file is out of date
//
// agent/test/unit/repository/dashboardsAsCode.test.ts runs the same check.
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { lostwriteDashboard } from "./lostwrite.ts";
import { operatorDashboard } from "./operator.ts";

/** Each committed JSON file and the code that makes it. */
export const dashboards: { path: string; build: () => unknown }[] = [
  { path: fileURLToPath(new URL("../lostwrite.json", import.meta.url)), build: lostwriteDashboard },
  { path: fileURLToPath(new URL("../lostwrite-operator.json", import.meta.url)), build: operatorDashboard },
];

/** The file's text as committed: two-space JSON and a final newline, so diffs stay readable. */
export function render(build: () => unknown): string {
  return `${JSON.stringify(build(), null, 2)}\n`;
}

/** The dashboards whose committed file differs from what their code makes now. */
export function staleDashboards(): string[] {
  return dashboards.filter((d) => readFileSync(d.path, "utf8") !== render(d.build)).map((d) => d.path);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv.includes("--check")) {
    const stale = staleDashboards();
    for (const path of stale) console.error(`${path} is out of date: run npm run dashboards`);
    process.exitCode = stale.length ? 1 : 0;
  } else {
    for (const d of dashboards) writeFileSync(d.path, render(d.build));
  }
}
