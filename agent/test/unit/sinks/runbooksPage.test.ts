// /runbooks: the page every alert's default runbook_url opens, served by the
// agent's real HTTP server on loopback from the docs/runbooks.md it ships.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import type { AddressInfo, Server } from "node:net";
import { after, before, describe, it } from "node:test";
import { parse } from "yaml";
import { startHttpServer } from "../../../src/sinks/httpServer.ts";
import { AgentMetrics } from "../../../src/telemetry/metrics.ts";
import { renderRunbooksPage } from "../../../src/sinks/runbooksPage.ts";
import { repoPath } from "../../repoPath.ts";

/** Every alert's runbook_url, as the shipped rule file has it. */
function runbookUrls(): Map<string, string> {
  const file = parse(readFileSync(repoPath("dashboards/alerts.yaml"), "utf8")) as {
    groups: { rules: { alert?: string; annotations?: { runbook_url?: string } }[] }[];
  };
  const urls = new Map<string, string>();
  for (const rule of file.groups.flatMap((g) => g.rules)) if (rule.alert) urls.set(rule.alert, rule.annotations?.runbook_url ?? "");
  return urls;
}

describe("the runbooks page", { timeout: 30_000 }, () => {
  let server: Server;
  let base: string;
  before(async () => {
    server = await startHttpServer({ host: "127.0.0.1", port: 0, metrics: new AgentMetrics(), ready: () => ({ ok: true, reason: "" }), runbooks: renderRunbooksPage() });
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it("opens every alert's runbook_url at the alert's own section, with the agent's address as the base", async () => {
    const urls = runbookUrls();
    assert.ok(urls.size >= 9, `alerts found: ${[...urls.keys()].join(", ")}`);
    for (const [alert, url] of urls) {
      const { pathname, hash } = new URL(url);
      const res = await fetch(`${base}${pathname}`);
      assert.equal(res.status, 200, `${alert}: ${pathname}`);
      assert.match(res.headers.get("content-type") ?? "", /^text\/html/);
      const html = await res.text();
      assert.ok(html.includes(`<h2 id="${hash.slice(1)}">${alert}</h2>`), `${alert}: no section at ${hash}`);
    }
  });

  it("renders the markdown (code, tables, links), not the raw text", () => {
    const { status, html } = renderRunbooksPage();
    assert.equal(status, 200);
    assert.match(html, /<pre><code class="language-sh">/);
    assert.match(html, /<a href="metrics.md">metrics.md<\/a>/);
    assert.doesNotMatch(html, /^## /m);
  });

  it("says what is missing when the agent was installed without its runbooks", () => {
    const { status, html } = renderRunbooksPage(null);
    assert.equal(status, 404);
    assert.match(html, /docs\/runbooks\.md is not installed/);
  });
});
