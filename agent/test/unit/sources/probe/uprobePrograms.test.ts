// One program per probed file, kept while processes of it come and go: a
// stand-in for bpftrace (a script that says hello, beats, and logs when it
// starts and stops, with the program it was given) shows what is started and
// stopped; the follow messages are real (refused connects on loopback).
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Logger } from "../../../../src/telemetry/log.ts";
import { AgentMetrics } from "../../../../src/telemetry/metrics.ts";
import { FollowChannel } from "../../../../src/sources/probe/followChannel.ts";
import { UprobePrograms } from "../../../../src/sources/probe/uprobePrograms.ts";

const quiet: Logger = { info() {}, warn() {}, error() {}, warnRateLimited() {}, warnOnce() {} };

void describe("uprobe programs", { timeout: 30_000 }, () => {
  let dir: string;
  let fake: string;
  let log: string;
  let channel: FollowChannel;

  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-uprobes-"));
    log = path.join(dir, "runs.log");
    fake = path.join(dir, "bpftrace");
    // Called as `bpftrace -f json [flags] FILE AGENT_PID`: logs the program's first line, then beats until told to stop
    // (a program whose first line says "slow" takes half a second to exit).
    writeFileSync(fake, String.raw`#!/bin/sh
eval "file=\$$(($# - 1))"
echo "start $(head -1 "$file")" >> "${log}"
trap 'echo "stop $(head -1 "$file")" >> "${log}"; case "$(head -1 "$file")" in *slow*) sleep 0.5;; esac; exit 0' INT TERM
printf '%s\n' '{"type": "printf", "data": "hello 1 1\n"}'
while :; do sleep 0.2; printf '%s\n' '{"type": "printf", "data": "tick 2\n"}'; done
`);
    chmodSync(fake, 0o755);
    channel = new FollowChannel();
    await channel.open();
  });

  after(() => {
    channel.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const runs = (): string[] => {
    try {
      return readFileSync(log, "utf8").trim().split("\n").filter(Boolean);
    } catch {
      return [];
    }
  };

  async function waitForRun(line: string): Promise<void> {
    const deadline = Date.now() + 10_000;
    while (!runs().includes(line)) {
      if (Date.now() > deadline) throw new Error(`waited for "${line}", saw ${JSON.stringify(runs())}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  const programsWith = (metrics: AgentMetrics, maxIdle: number): UprobePrograms =>
    new UprobePrograms({
      what: "Test probe",
      bpftrace: fake,
      procRoot: "/proc",
      agentHostPid: process.pid,
      metrics,
      log: quiet,
      nowNs: () => process.hrtime.bigint(),
      follow: channel,
      execWatch: false,
      isTarget: () => true,
      attachedGauge: metrics.goProbesAttached,
      restarts: metrics.goProbeRestarts,
      onRecord: () => {},
      onAttached: () => {},
      maxIdle,
    });
  const spec = (name: string) => () => {
    const file = path.join(dir, name);
    writeFileSync(file, name);
    return { path: file, render: () => `// ${name}\n`, details: { file: name } };
  };

  void it("starts one program per file, keeps it while pids come and go, and stops the longest idle past maxIdle", async () => {
    const metrics = new AgentMetrics();
    const programs = programsWith(metrics, 2);
    try {
      // Two live processes of file a, one after the other, coming and going: one program.
      const [live1, live2] = [process.pid, process.ppid];
      await programs.add(live1, "a", spec("a"));
      await waitForRun("start // a");
      await programs.add(live2, "a", spec("a"));
      await programs.remove(live1);
      await programs.remove(live2);
      await programs.add(live1, "a", spec("a"));
      await programs.remove(live1);
      assert.deepEqual(runs(), ["start // a"], "never restarted for a pid");
      assert.equal(programs.pidsOf("a"), 0);

      // Three more files, each left idle in turn: a and b, idle longest, are stopped; c and d wait.
      for (const name of ["b", "c", "d"]) {
        await programs.add(live1, name, spec(name));
        await waitForRun(`start // ${name}`);
        await programs.remove(live1);
      }
      await waitForRun("stop // b");
      assert.deepEqual(runs().filter((r) => r.startsWith("stop")), ["stop // a", "stop // b"]);
      assert.deepEqual(await metrics.goProbeRestarts.get().then((m) => m.values.reduce((sum, v) => sum + v.value, 0)), 0);
    } finally {
      await programs.stop();
    }
    assert.deepEqual(runs().filter((r) => r.startsWith("stop")).sort(), ["stop // a", "stop // b", "stop // c", "stop // d"]);
  });

  void it("keeps a program whose file is used again while an older idle one is being stopped", async () => {
    const programs = programsWith(new AgentMetrics(), 1);
    const live = process.pid;
    try {
      await programs.add(live, "slow-e", spec("slow-e"));
      await waitForRun("start // slow-e");
      await programs.remove(live); // idle, kept: one may wait
      await programs.add(live, "f", spec("f"));
      await waitForRun("start // f");
      // f idle too: two idle past maxIdle 1, so slow-e, idle longest, is stopped, which takes half a second…
      const removing = programs.remove(live);
      await waitForRun("stop // slow-e");
      // …meanwhile a new process of f starts.
      await programs.add(process.ppid, "f", spec("f"));
      await removing;
      assert.equal(programs.pidsOf("f"), 1);
      assert.deepEqual(runs().filter((r) => r.endsWith("// f")), ["start // f"], "f's program neither stopped nor started again");
    } finally {
      await programs.stop();
    }
  });
});
