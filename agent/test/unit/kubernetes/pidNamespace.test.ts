import { test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { hostPidFor, nsPidFor, parseNsPids, readNsPids } from "../../../src/sources/targets/pidNamespace.ts";

const TREE = fileURLToPath(new URL("../../fixtures/proc/containerd-v2-systemd/", import.meta.url));

void test("NSpid lists the pid in every namespace, host first", async () => {
  assert.deepEqual(await readNsPids(TREE, 4242), [4242, 1]);
  assert.deepEqual(await readNsPids(TREE, 1), [1]);
  assert.equal(await readNsPids(TREE, 999999), null);
});

void test("a host pid maps to the pid the process sees for itself", async () => {
  assert.equal(await nsPidFor(TREE, 4242), 1);
  assert.equal(await nsPidFor(TREE, 4250), 7);
  assert.equal(await nsPidFor(TREE, 900), 900);
});

void test("a pid from a span maps back to the host pid among the container's pids", async () => {
  assert.equal(await hostPidFor(TREE, 1, [4242, 4250]), 4242);
  assert.equal(await hostPidFor(TREE, 7, [4242, 4250]), 4250);
  assert.equal(await hostPidFor(TREE, 3, [4242, 4250]), null);
});

void test("two containers without a shared PID namespace both have pid 1: no guess", async () => {
  assert.equal(await hostPidFor(TREE, 1, [4242, 4300]), null);
  assert.equal(await hostPidFor(TREE, 1, [4300]), 4300);
});

void test("malformed or missing NSpid lines are rejected", () => {
  assert.equal(parseNsPids("Name:\tx\n"), null);
  assert.equal(parseNsPids("NSpid:\t12\tx\n"), null);
  assert.equal(parseNsPids("NSpid:\t0\n"), null);
  assert.deepEqual(parseNsPids("NSpid:\t12\t5\t1\n"), [12, 5, 1]);
});
