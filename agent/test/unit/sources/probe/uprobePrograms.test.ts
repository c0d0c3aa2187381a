// The probed files' programs, kept while processes of the files come and go:
// each new file's in a bpftrace of its own at once, merged into one once the
// files stay unchanged. A stand-in for bpftrace (a script that says hello,
// beats, and logs when it starts and stops, with the files its program holds)
// shows what is started and stopped; the follow messages are real (refused
// connects on loopback).
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
    // file takes half a second to exit; one holding a "broken" file exits at once, before its hello; one
    // holding a "held" file and another (a merge) compiles until the test opens the gate.
    writeFileSync(fake, String.raw`#!/bin/sh
eval "file=\$$(($# - 1))"
files=$(grep '^// #' "$file" | sed 's|^// #[0-9]*: ||' | paste -sd, -)
echo "start $files" >> "${log}"
case "$files" in *broken*) exit 1;; esac
trap 'echo "stop $files" >> "${log}"; case "$files" in *slow*) sleep 0.5;; esac; exit 0' INT TERM
case "$files" in *held*,*|*,*held*) while [ ! -e "${dir}/gate" ]; do sleep 0.05; done;; esac
echo "attached $files" >> "${log}"
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

  /** Polls `ok` (the fake bpftrace's log, the host's state) until it holds; 10 s at most, naming what it waited for. */
  async function waitFor(what: string, ok: () => boolean | Promise<boolean>): Promise<void> {
    const deadline = Date.now() + 10_000;
    while (!(await ok())) {
      if (Date.now() > deadline) throw new Error(`waited for ${what}; runs: ${JSON.stringify(runs())}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  const waitForRun = (line: string): Promise<void> => waitFor(`"${line}"`, () => runs().includes(line));

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
  /** No merge within a test unless it asks for one. */
  const hostWith = (metrics: AgentMetrics, mergeAfterMs = 600_000, log: Logger = quiet): UprobeHost =>
    new UprobeHost({ bpftrace: fake, agentHostPid: process.pid, metrics, log, mergeAfterMs });
  const attachedNow = async (metrics: AgentMetrics): Promise<number> => (await metrics.goProbesAttached.get()).values[0]?.value ?? 0;
  const gate = (): string => path.join(dir, "gate");
  const spec = (name: string) => () => {
    const file = path.join(dir, name);
    writeFileSync(file, name);
    return { path: file, render: () => `// ${name}\n`, details: { file: name } };
  };

  void it("starts each new file's program at once in a bpftrace of its own, never restarts one for a pid, and stops a file's own program when it goes, compiling nothing", async () => {
    writeFileSync(log, "");
    const metrics = new AgentMetrics();
    const host = hostWith(metrics);
    const programs = programsWith(metrics, host, 2);
    try {
      // Two live processes of file a, one after the other, coming and going: one start.
      const [live1, live2] = [process.pid, process.ppid];
      await programs.add(live1, "a", spec("a"));
      await waitForRun("attached a");
      await programs.add(live2, "a", spec("a"));
      await programs.remove(live1);
      await programs.remove(live2);
      await programs.add(live1, "a", spec("a"));
      await programs.remove(live1);
      assert.deepEqual(runs(), ["start a", "attached a"], "never restarted for a pid");
      assert.equal(programs.pidsOf("a"), 0);

      // Three more files, each left idle in turn, each in a program of its own; a and b, idle longest, are stopped.
      await programs.add(live1, "b", spec("b"));
      await waitForRun("start b");
      await programs.remove(live1);
      await programs.add(live1, "c", spec("c"));
      await waitForRun("start c");
      await programs.remove(live1);
      await waitForRun("stop a");
      await programs.add(live1, "d", spec("d"));
      await waitForRun("start d");
      await programs.remove(live1);
      await waitForRun("stop b");
      assert.deepEqual(starts(), ["start a", "start b", "start c", "start d"], "no program compiled again");
      assert.equal(await sum(metrics.goProbeRestarts), 0, "no crash counted");
      assert.equal(await sum(metrics.uprobeProgramReloads), 0, "nothing merged");
      await waitFor("c and d attached", async () => (await attachedNow(metrics)) === 2);
      assert.equal(host.programs, 2);
    } finally {
      await host.stop();
      await programs.stop();
    }
    assert.deepEqual(runs().filter((r) => r.startsWith("stop")).sort(), ["stop a", "stop b", "stop c", "stop d"], "each stopped once");
  });

  void it("merges the programs into one once the files have not changed for a while, made before the old ones stop, while a new file gets its own at once", async () => {
    writeFileSync(log, "");
    rmSync(gate(), { force: true });
    const metrics = new AgentMetrics();
    const host = hostWith(metrics, 200);
    const programs = programsWith(metrics, host, 4);
    try {
      await programs.add(process.pid, "m", spec("m"));
      await programs.add(process.ppid, "held-n", spec("held-n"));
      await waitForRun("attached m");
      await waitForRun("attached held-n");
      // Unchanged for 200 ms: merged, in a compile the gate holds.
      await waitFor("the merge's start", () => starts().some((r) => r === "start m,held-n" || r === "start held-n,m"));
      const merged = starts().at(-1)!.slice("start ".length);
      // A new file while the merge compiles: its own program attaches, the merge still compiling.
      await programs.add(1, "o", spec("o"));
      await waitForRun("attached o");
      await waitFor("o counted attached", async () => (await attachedNow(metrics)) === 3);
      assert.ok(!runs().includes(`attached ${merged}`), "o did not wait for the merge");
      assert.ok(!runs().includes("stop m") && !runs().includes("stop held-n"), "the old programs run while the merge compiles");
      writeFileSync(gate(), "");
      await waitForRun("stop m");
      await waitForRun("stop held-n");
      assert.ok(runs().indexOf(`attached ${merged}`) < runs().indexOf("stop m"), "made before the old ones were stopped");
      // o, which came during the merge, is merged in at the next one.
      await waitFor("o merged", () => runs().includes("stop o") && starts().length === 5);
      assert.equal(starts().at(-1)!.split(",").length, 3, starts().at(-1));
      await waitFor("the merged program taken over", () => host.programs === 1);
      assert.equal(host.parts, 3);
      assert.equal(await sum(metrics.uprobeProgramReloads, "merged"), 2);
      assert.equal(await attachedNow(metrics), 3, "every file attached throughout");
      assert.equal(await sum(metrics.goProbeRestarts), 0, "no crash counted");
    } finally {
      await host.stop();
      await programs.stop();
      rmSync(gate(), { force: true });
    }
  });

  void it("takes a file out of a merged program at once, and its probes at the next merge", async () => {
    writeFileSync(log, "");
    const metrics = new AgentMetrics();
    const host = hostWith(metrics, 200);
    const programs = programsWith(metrics, host, 0);
    try {
      await programs.add(process.pid, "p", spec("p"));
      await programs.add(process.ppid, "q", spec("q"));
      await waitFor("p and q merged", () => host.programs === 1 && host.parts === 2);
      await programs.remove(process.ppid); // q idle; none may wait idle
      assert.equal(host.parts, 1, "q's lines count no more");
      await waitFor("q counted out", async () => (await attachedNow(metrics)) === 1);
      const mergedOf = starts().at(-1)!;
      await waitFor("p alone", () => starts().at(-1) === "start p" && runs().includes(`stop ${mergedOf.slice("start ".length)}`));
      assert.equal(await sum(metrics.uprobeProgramReloads, "file_removed"), 1);
      assert.equal(host.programs, 1);
    } finally {
      await host.stop();
      await programs.stop();
    }
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
      await waitForRun("attached f");
      // f idle too: two idle past maxIdle 1, so slow-e, idle longest, is taken out, which takes half a second…
      await programs.remove(live);
      await waitForRun("stop slow-e");
      // …meanwhile a new process of f starts.
      await programs.add(process.ppid, "f", spec("f"));
      assert.equal(programs.pidsOf("f"), 1);
      assert.deepEqual(starts(), ["start slow-e", "start f"], "f's program kept through slow-e's removal");
      assert.ok(!runs().includes("stop f"));
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
    const host = hostWith(metrics, 600_000, logger);
    const programs = programsWith(metrics, host, 4, logger);
    try {
      await programs.add(process.pid, "g", spec("g"));
      await waitForRun("attached g");
      await programs.add(process.ppid, "broken-h", spec("broken-h"));
      await waitForRun("start broken-h");
      // Given up on, once the bpftrace with it exited; g's program ran on. A new process of broken-h changes nothing.
      await waitFor("the warning", () => warnings.some((w) => w.startsWith("Test probe did not attach")));
      await programs.add(1, "broken-h", spec("broken-h"));
      assert.deepEqual(runs(), ["start g", "attached g", "start broken-h"], "g's program never stopped, nothing started again");
      assert.equal(await attachedNow(metrics), 1, "g attached, broken-h not");
      assert.equal(await sum(metrics.goProbeRestarts), 0, "a program that never attached is no crash of g");
    } finally {
      await host.stop();
      await programs.stop();
    }
  });
});
