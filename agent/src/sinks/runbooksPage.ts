// The alerts' runbooks as a web page the agent serves at /runbooks, from the
// docs/runbooks.md it ships with: an alert's default runbook_url then opens
// the runbook of the very version that raised it, with nothing to host
// (`kubectl -n lostwrite port-forward svc/lostwrite-metrics 9470`, then
// http://localhost:9470/runbooks). Headings get GitHub's anchors, so
// `#<alert name in lower case>` lands on the alert's section here as in the
// repository.
import { readFileSync } from "node:fs";
import path from "node:path";
import { Marked } from "marked";
import { gfmHeadingId } from "marked-gfm-heading-id";
import { dirAbove } from "../installPaths.ts";

const RUNBOOKS = "docs/runbooks.md";

/** The page, rendered once; a short text page naming what is missing when the image lacks the file. */
export function renderRunbooksPage(file = locateRunbooks()): { status: number; html: string } {
  if (file === null) return { status: 404, html: page("lostwrite runbooks", `<p>${RUNBOOKS} is not installed beside the agent.</p>`) };
  const markdown = readFileSync(file, "utf8");
  return { status: 200, html: page("lostwrite runbooks", new Marked(gfmHeadingId()).parse(markdown, { async: false })) };
}

function locateRunbooks(): string | null {
  const root = dirAbove(RUNBOOKS);
  return root === null ? null : path.join(root, RUNBOOKS);
}

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${title}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem}code,pre{font-size:90%}pre{overflow-x:auto;background:#f4f4f4;padding:.5rem}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2rem .4rem}</style>
</head><body>
${body}
</body></html>
`;
}
