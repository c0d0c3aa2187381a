import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import * as names from "../../../../src/sources/spans/spanAttributes.ts";
import { isStatusWrite, isWrite, pathOf } from "../../../../src/sources/spans/spanAttributes.ts";
import { repoPath } from "../../../repoPath.ts";

void test("a status write is a PUT or PATCH whose path ends in /status", () => {
  assert.equal(isStatusWrite("PATCH", "/apis/example.com/v1/namespaces/default/widgets/w1/status"), true);
  assert.equal(isStatusWrite("put", "/api/v1/namespaces/default/pods/p/status?fieldManager=x"), true);
  assert.equal(isStatusWrite("PUT", "/apis/example.com/v1/namespaces/default/widgets/w1/status/"), true);
  assert.equal(isStatusWrite("GET", "/apis/example.com/v1/namespaces/default/widgets/w1/status"), false);
  assert.equal(isStatusWrite("POST", "/apis/example.com/v1/namespaces/default/widgets/w1/status"), false);
  assert.equal(isStatusWrite("PATCH", "/apis/example.com/v1/namespaces/default/widgets/w1"), false);
  assert.equal(isStatusWrite("PATCH", "/apis/example.com/v1/namespaces/status/widgets/w1"), false);
  assert.equal(isStatusWrite(null, "/x/status"), false);
  assert.equal(isWrite("delete"), true);
  assert.equal(isWrite("GET"), false);
  assert.equal(pathOf("https://10.96.0.1:443/api/v1/pods/p/status?x=1"), "/api/v1/pods/p/status");
  assert.equal(pathOf("/api/v1/pods?watch=1"), "/api/v1/pods");
  assert.equal(pathOf("not a url"), null);
});

void test("docs/spans.md names every attribute the module reads", async () => {
  const doc = await readFile(repoPath("docs/spans.md"), "utf8");
  const all = new Set<string>(Object.values(names.PROCESS_ATTRIBUTES));
  for (const value of Object.values(names)) {
    if (Array.isArray(value)) for (const name of value as unknown[]) if (typeof name === "string") all.add(name);
  }
  all.add(names.ERROR_TYPE_ATTRIBUTE);
  all.add(names.THREAD_ID_ATTRIBUTE);
  assert.ok(all.size > 25);
  const missing = [...all].filter((name) => !doc.includes(`\`${name}\``));
  assert.deepEqual(missing, []);
});
