import { test } from "node:test";
import assert from "node:assert/strict";
import { parseNsPids, readNsPids } from "../../../../src/sources/targets/pidNamespace.ts";
import { repoPath } from "../../../repoPath.ts";

const TREE = repoPath("agent/test/fixtures/proc/containerd-v2-systemd") + "/";

void test("NSpid lists the pid in every namespace, host first", async () => {
  assert.deepEqual(await readNsPids(TREE, 4242), [4242, 1]);
  assert.deepEqual(await readNsPids(TREE, 1), [1]);
  assert.equal(await readNsPids(TREE, 999999), null);
});

void test("malformed or missing NSpid lines are rejected", () => {
  assert.equal(parseNsPids("Name:\tx\n"), null);
  assert.equal(parseNsPids("NSpid:\t12\tx\n"), null);
  assert.equal(parseNsPids("NSpid:\t0\n"), null);
  assert.deepEqual(parseNsPids("NSpid:\t12\t5\t1\n"), [12, 5, 1]);
});
