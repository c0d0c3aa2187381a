// The agent's own identity as the kernel knows it, and the decision on a
// process the probe reports at its exec, read from /proc trees made for the
// test (host pids, comm, cmdline, NSpid).
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { AgentMetrics } from "../../../../src/telemetry/metrics.ts";
import { parseAgentIdentity, readAgentIdentity } from "../../../../src/sources/targets/agentIdentity.ts";
import { TargetWatcher, type TargetChanges } from "../../../../src/sources/targets/targetWatcher.ts";

function procTree(processes: Record<string, { comm: string; argv?: string[]; status?: string }>): string {
  const root = mkdtempSync(path.join(os.tmpdir(), "lostwrite-proc-"));
  for (const [pid, { comm, argv = [comm], status = `Name:\t${comm}\nNSpid:\t${pid}\n` }] of Object.entries(processes)) {
    mkdirSync(path.join(root, pid));
    writeFileSync(path.join(root, pid, "comm"), `${comm}\n`);
    writeFileSync(path.join(root, pid, "cmdline"), argv.join("\0") + "\0");
    writeFileSync(path.join(root, pid, "status"), status);
  }
  return root;
}

describe("agent identity", () => {
  it("is the outermost NSpid and the PPid of the host's view of self, in a pod as on the host", () => {
    // The agent as pid 1 of its pod, 48213 on the host, seen through the host /proc.
    assert.deepEqual(parseAgentIdentity("Name:\tnode\nPid:\t48213\nPPid:\t48190\nNSpid:\t48213\t1\n"), { hostPid: 48213, hostPpid: 48190 });
    assert.deepEqual(parseAgentIdentity("PPid:\t1\nNSpid:\t777\n"), { hostPid: 777, hostPpid: 1 });
    assert.equal(parseAgentIdentity("Name:\tnode\nPPid:\t1\n"), null);
  });

  it("names the proc root when it is not a procfs", () => {
    const root = mkdtempSync(path.join(os.tmpdir(), "lostwrite-noproc-"));
    assert.throws(() => readAgentIdentity(root), /proc-root: cannot read .*self\/status.*is ".*" the host's \/proc\?/);
    mkdirSync(path.join(root, "self"));
    writeFileSync(path.join(root, "self", "status"), "Name:\tx\n");
    assert.throws(() => readAgentIdentity(root), /no NSpid\/PPid line/);
  });

  it("reads this process from the real /proc", () => {
    assert.equal(readAgentIdentity("/proc").hostPid, process.pid);
  });
});

describe("TargetWatcher.admitExec", () => {
  const root = procTree({
    40: { comm: "manager", status: "Name:\tmanager\nNSpid:\t40\t1\n" },
    41: { comm: "python3", argv: ["python3", "-m", "kopf", "run"] },
    42: { comm: "bash" },
    43: { comm: "manager" },
    44: { comm: "pod-proc" },
  });
  const watcher = (changes: TargetChanges[]) => {
    const w = new TargetWatcher({
      rules: { pids: [], comm: /^manager$/, cmdline: /kopf/, exclude: (pid) => pid === 43 },
      procRoot: root,
      metrics: new AgentMetrics(),
      externalExec: (pid, comm) =>
        pid === 44 ? { pid, tid: pid, process: comm, namespace: "ops", pod: "op-1", container: "manager", controller: "op" } : null,
      onError: (err) => assert.fail(String(err)),
    });
    w.onChange((c) => {
      changes.push(c);
      return Promise.resolve();
    });
    return w;
  };

  it("admits by comm, cmdline or the other source, with NSpid and identity, and tells the sink", () => {
    const changes: TargetChanges[] = [];
    const w = watcher(changes);
    assert.equal(w.admitExec(40, "manager"), true);
    assert.equal(w.admitExec(41, "python3"), true);
    assert.equal(w.admitExec(44, "pod-proc"), true);
    assert.deepEqual(w.identity(40)?.nsPids, [40, 1]);
    assert.equal(w.identity(41)?.source, "cmdline");
    assert.deepEqual([w.identity(44)?.source, w.identity(44)?.identity.pod], ["kubernetes", "op-1"]);
    assert.deepEqual(changes.map((c) => c.added.map((t) => t.pid)), [[40], [41], [44]]);
  });

  it("tells every subscriber, in the order they subscribed", async () => {
    const first: TargetChanges[] = [];
    const heard: string[] = [];
    const w = watcher(first);
    w.onChange((c) => {
      heard.push(`second ${c.added.map((t) => t.pid).join()} after the first heard ${first.length}`);
      return Promise.resolve();
    });
    assert.equal(w.admitExec(40, "manager"), true);
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(heard, ["second 40 after the first heard 1"]);
  });

  it("refuses what no rule matches and the agent itself", () => {
    const w = watcher([]);
    assert.equal(w.admitExec(42, "bash"), false);
    assert.equal(w.admitExec(43, "manager"), false);
    assert.deepEqual(w.pids(), []);
  });

  it("decides afresh when a target execs another program", () => {
    const changes: TargetChanges[] = [];
    const w = watcher(changes);
    w.admitExec(40, "manager");
    assert.equal(w.admitExec(40, "sh"), false);
    assert.deepEqual(w.pids(), []);
    assert.deepEqual(changes[1]?.removed.map((t) => `${t.pid} ${t.comm}`), ["40 manager"]);
  });

  it("keeps a just-admitted target that a scan begun before its exec did not see", async () => {
    // The comm rule matches nothing the scan reads except pid 40; pid 44 only
    // the other source knows, and its list is not updated yet.
    const w = watcher([]);
    w.admitExec(44, "pod-proc");
    await w.scan();
    assert.ok(w.pids().includes(44));
  });

  it("keeps it when it renamed its main thread after exec (Node 24: MainThread), drops it once it exited", async () => {
    const w = watcher([]);
    w.admitExec(44, "pod-proc");
    writeFileSync(path.join(root, "44", "comm"), "MainThread\n");
    await w.scan();
    assert.ok(w.pids().includes(44), "renamed, still running");
    w.admitExec(41, "python3");
    rmSync(path.join(root, "41"), { recursive: true });
    await w.scan();
    assert.ok(!w.pids().includes(41), "exited");
  });
});
