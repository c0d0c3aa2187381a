// Every probed file's program in one bpftrace, kept while processes of the
// files come and go: a stand-in for bpftrace (a script that says hello, beats,
// and logs when it starts and stops, with the files its program holds) shows
// what is started and stopped; the follow messages are real (refused connects
// on loopback).
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Logger } from "../../../../src/telemetry/log.ts";
import { AgentMetrics } from "../../../../src/telemetry/metrics.ts";
import { FollowChannel } from "../../../../src/sources/probe/followChannel.ts";
import { UprobeHost } from "../../../../src/sources/probe/uprobeHost.ts";
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
    // Called as `bpftrace -f json [flags] FILE AGENT_PID`: logs the files its program holds (the combined
    // program's "// #ID: FIRST LINE" comments), then beats until told to stop. A program holding a "slow"
    // file takes half a second to exit; one holding a "broken" file exits at once, before its hello.
    writeFileSync(fake, String.raw`#!/bin/sh
eval "file=\$$(($# - 1))"
files=$(grep '^// #' "$file" | sed 's|^// #[0-9]*: ||' | paste -sd, -)
echo "start $files" >> "${log}"
case "$files" in *broken*) exit 1;; esac
trap 'echo "stop $files" >> "${log}"; case "$files" in *slow*) sleep 0.5;; esac; exit 0' INT TERM
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
  const starts = (): string[] => runs().filter((r) => r.startsWith("start"));

  async function waitForRun(line: string): Promise<void> {
    const deadline = Date.now() + 10_000;
    while (!runs().includes(line)) {
      if (Date.now() > deadline) throw new Error(`waited for "${line}", saw ${JSON.stringify(runs())}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  const sum = async (counter: AgentMetrics["goProbeRestarts"], reason?: string): Promise<number> =>
    (await counter.get()).values.filter((v) => reason === undefined || v.labels.reason === reason).reduce((total, v) => total + v.value, 0);

  const programsWith = (metrics: AgentMetrics, host: UprobeHost, maxIdle: number, log: Logger = quiet): UprobePrograms =>
    new UprobePrograms({
      what: "Test probe",
      host,
      procRoot: "/proc",
      metrics,
      log,
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
  const hostWith = (metrics: AgentMetrics): UprobeHost => new UprobeHost({ bpftrace: fake, agentHostPid: process.pid, metrics, log: quiet });
  const spec = (name: string) => () => {
    const file = path.join(dir, name);
    writeFileSync(file, name);
    return { path: file, render: () => `// ${name}\n`, details: { file: name } };
  };

  void it("runs every file's program in one bpftrace, restarted when a file comes or goes, never for a pid; the longest idle go past maxIdle", async () => {
    writeFileSync(log, "");
    const metrics = new AgentMetrics();
    const host = hostWith(metrics);
    const programs = programsWith(metrics, host, 2);
    try {
      // Two live processes of file a, one after the other, coming and going: one start.
      const [live1, live2] = [process.pid, process.ppid];
      await programs.add(live1, "a", spec("a"));
      await waitForRun("start a");
      await programs.add(live2, "a", spec("a"));
      await programs.remove(live1);
      await programs.remove(live2);
      await programs.add(live1, "a", spec("a"));
      await programs.remove(live1);
      assert.deepEqual(runs(), ["start a"], "never restarted for a pid");
      assert.equal(programs.pidsOf("a"), 0);

      // Three more files, each left idle in turn: each comes in with a restart; a and b, idle longest, are taken out.
      await programs.add(live1, "b", spec("b"));
      await waitForRun("start a,b");
      await programs.remove(live1);
      await programs.add(live1, "c", spec("c"));
      await waitForRun("start a,b,c");
      await programs.remove(live1);
      await waitForRun("start b,c");
      await programs.add(live1, "d", spec("d"));
      await waitForRun("start b,c,d");
      await programs.remove(live1);
      await waitForRun("start c,d");
      assert.deepEqual(starts(), ["start a", "start a,b", "start a,b,c", "start b,c", "start b,c,d", "start c,d"]);
      assert.ok(runs().indexOf("start a,b") < runs().indexOf("stop a"), "the new program started before the old one was stopped");
      assert.equal(await sum(metrics.goProbeRestarts), 0, "no crash counted");
      assert.equal(await sum(metrics.uprobeProgramReloads, "file_added"), 3);
      assert.equal(await sum(metrics.uprobeProgramReloads, "file_removed"), 2);
      assert.equal((await metrics.goProbesAttached.get()).values[0]?.value, 2, "c and d attached");
    } finally {
      await host.stop();
      await programs.stop();
    }
    assert.equal(runs().at(-1), "stop c,d", "stopped once, with what it held");
  });

  void it("keeps a program whose file is used again while an older idle one is being taken out", async () => {
    writeFileSync(log, "");
    const metrics = new AgentMetrics();
    const host = hostWith(metrics);
    const programs = programsWith(metrics, host, 1);
    const live = process.pid;
    try {
      await programs.add(live, "slow-e", spec("slow-e"));
      await waitForRun("start slow-e");
      await programs.remove(live); // idle, kept: one may wait
      await programs.add(live, "f", spec("f"));
      await waitForRun("start slow-e,f");
      // f idle too: two idle past maxIdle 1, so slow-e, idle longest, is taken out, which takes half a second…
      const removing = programs.remove(live);
      await waitForRun("stop slow-e,f");
      // …meanwhile a new process of f starts.
      await programs.add(process.ppid, "f", spec("f"));
      await removing;
      await waitForRun("start f");
      assert.equal(programs.pidsOf("f"), 1);
      assert.deepEqual(starts(), ["start slow-e", "start slow-e,f", "start f"], "f's program kept through slow-e's removal");
    } finally {
      await host.stop();
      await programs.stop();
    }
  });

  void it("opens a file through its next process when the first was gone before the file could be opened", async () => {
    writeFileSync(log, "");
    const metrics = new AgentMetrics();
    const host = hostWith(metrics);
    const programs = programsWith(metrics, host, 4);
    try {
      await programs.add(process.pid, "k", () => ({ path: path.join(dir, "gone", "exe"), render: () => "// k\n", details: { file: "k" } }));
      assert.deepEqual(starts(), [], "nothing to start without the file");
      await programs.add(process.ppid, "k", spec("k"));
      await waitForRun("start k");
    } finally {
      await host.stop();
      await programs.stop();
    }
  });

  void it("gives up on a file whose program bpftrace refuses, the others' program running on meanwhile", async () => {
    writeFileSync(log, "");
    const metrics = new AgentMetrics();
    const warnings: string[] = [];
    const logger: Logger = { ...quiet, warn: (msg) => warnings.push(msg) };
    const host = new UprobeHost({ bpftrace: fake, agentHostPid: process.pid, metrics, log: logger });
    const programs = programsWith(metrics, host, 4, logger);
    try {
      await programs.add(process.pid, "g", spec("g"));
      await waitForRun("start g");
      await programs.add(process.ppid, "broken-h", spec("broken-h"));
      await waitForRun("start g,broken-h");
      // Given up on, once the bpftrace with it exited; g's program ran on. A new process of broken-h changes nothing.
      const deadline = Date.now() + 10_000;
      while (!warnings.some((w) => w.startsWith("Test probe did not attach")) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      await programs.add(1, "broken-h", spec("broken-h"));
      assert.deepEqual(runs(), ["start g", "start g,broken-h"], "g's program never stopped, nothing started again");
      assert.equal((await metrics.goProbesAttached.get()).values[0]?.value, 1, "g attached, broken-h not");
      assert.equal(await sum(metrics.goProbeRestarts), 0, "a program that never attached is no crash of g");
    } finally {
      await host.stop();
      await programs.stop();
    }
  });
});
