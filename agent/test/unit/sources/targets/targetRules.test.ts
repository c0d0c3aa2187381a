// Which processes are targets, read from a /proc tree made for the test.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { diffTargets, scanTargets } from "../../../../src/sources/targets/targetRules.ts";

function procTree(processes: Record<number, { comm: string; argv: string[] }>): string {
  const root = mkdtempSync(path.join(os.tmpdir(), "lostwrite-proc-"));
  for (const [pid, { comm, argv }] of Object.entries(processes)) {
    mkdirSync(path.join(root, pid));
    writeFileSync(path.join(root, pid, "comm"), `${comm}\n`);
    writeFileSync(path.join(root, pid, "cmdline"), argv.join("\0") + "\0");
  }
  mkdirSync(path.join(root, "self"));
  return root;
}

const none = { pids: [], comm: null, cmdline: null, exclude: () => false };

describe("scanTargets", { timeout: 10_000 }, () => {
  const root = procTree({
    10: { comm: "manager", argv: ["/manager", "--leader-elect"] },
    11: { comm: "python3", argv: ["python3", "-m", "kopf", "run", "op.py"] },
    12: { comm: "bash", argv: ["bash"] },
    13: { comm: "manager", argv: ["/manager"] },
  });

  it("selects by explicit pid, comm and cmdline, naming the rule, and skips excluded and missing pids", async () => {
    const found = await scanTargets({ pids: [12, 99], comm: /^manager$/, cmdline: /kopf/, exclude: (pid) => pid === 13 }, root);
    assert.deepEqual(
      [...found.values()].map((t) => `${t.pid} ${t.comm} ${t.source}`).sort(),
      ["10 manager comm", "11 python3 cmdline", "12 bash pid"],
    );
  });

  it("reads no command line when no rule needs it", async () => {
    const found = await scanTargets({ ...none, comm: /^manager$/ }, root);
    assert.deepEqual([...found.values()].map((t) => t.cmdline), ["", ""]);
  });

  it("lets the event loop turn while it reads a node of many processes", async () => {
    const many = procTree(Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [100 + i, { comm: `p${i}`, argv: ["p"] }])));
    let read = 0;
    let readWhenTheLoopTurned: number | null = null;
    setImmediate(() => (readWhenTheLoopTurned = read));
    const found = await scanTargets({ ...none, comm: /^p\d+$/, exclude: () => (read++, false) }, many);
    assert.equal(found.size, 1000);
    assert.ok(readWhenTheLoopTurned !== null && readWhenTheLoopTurned > 0 && readWhenTheLoopTurned < 1000, `the loop turned after ${readWhenTheLoopTurned} of 1000`);
  });

  it("treats a pid whose comm changed as a new process", async () => {
    const before = await scanTargets({ ...none, pids: [10, 11] }, root);
    const after = new Map(before);
    after.set(10, { ...before.get(10)!, comm: "other" });
    after.delete(11);
    const diff = diffTargets(before, after);
    assert.deepEqual(diff.removed.map((t) => t.pid).sort(), [10, 11]);
    assert.deepEqual(diff.added.map((t) => `${t.pid} ${t.comm}`), ["10 other"]);
  });
});
