// The dashboards' JSON is generated from dashboards/src (the Grafana
// Foundation SDK): the committed files must be what the code makes now, so a
// hand edit of the JSON, or a code change without `npm run dashboards`, fails.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dashboards, render } from "../../../../dashboards/src/generate.ts";
import { dashboardPath } from "../../e2e/support/dashboardQueries.ts";

void test("every committed dashboard JSON is what dashboards/src generates (npm run dashboards)", () => {
  assert.ok(dashboards.some((d) => d.path === dashboardPath), "the on-call dashboard the other tests read is generated");
  for (const d of dashboards) {
    const committed = JSON.parse(readFileSync(d.path, "utf8")) as unknown;
    const generated = JSON.parse(render(d.build)) as unknown;
    // deepEqual first: its message names the first differing field.
    assert.deepEqual(committed, generated, `${d.path} is out of date: run npm run dashboards`);
    assert.equal(readFileSync(d.path, "utf8"), render(d.build), `${d.path} is formatted differently: run npm run dashboards`);
  }
});

void test("the generator is deterministic", () => {
  for (const d of dashboards) assert.equal(render(d.build), render(d.build));
});
