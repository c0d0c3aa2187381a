// The kernel's count of skipped program runs, read as the agent reads it:
// from each BPF program descriptor's fdinfo under a process's /proc entry.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { recursionMisses } from "../../../../src/sources/probe/missedRuns.ts";

const FDINFO = (misses: number) => `pos:\t0\nflags:\t02000002\nprog_type:\t5\nprog_id:\t7\nrun_time_ns:\t0\nrun_cnt:\t0\nrecursion_misses:\t${misses}\nverified_insns:\t12\n`;

describe("recursionMisses", { timeout: 10_000 }, () => {
  const procRoot = mkdtempSync(path.join(os.tmpdir(), "lostwrite-missed-runs-"));
  after(() => rmSync(procRoot, { recursive: true, force: true }));

  function proc(pid: number, fds: Record<string, { link: string; info: string }>): void {
    mkdirSync(path.join(procRoot, String(pid), "fd"), { recursive: true });
    mkdirSync(path.join(procRoot, String(pid), "fdinfo"), { recursive: true });
    for (const [fd, { link, info }] of Object.entries(fds)) {
      symlinkSync(link, path.join(procRoot, String(pid), "fd", fd));
      writeFileSync(path.join(procRoot, String(pid), "fdinfo", fd), info);
    }
  }

  it("sums the skipped runs of every program the process holds, and nothing of its maps or files", async () => {
    proc(10, {
      "3": { link: "anon_inode:bpf-prog", info: FDINFO(5) },
      "4": { link: "anon_inode:bpf-map", info: "map_type:\t1\nrecursion_misses:\t99\n" },
      "5": { link: "/dev/null", info: "pos:\t0\n" },
      "6": { link: "anon_inode:bpf-prog", info: FDINFO(2) },
    });
    assert.equal(await recursionMisses(10, procRoot), 7);
  });

  it("is 0 for a process that is gone, and for a kernel that does not print the count", async () => {
    assert.equal(await recursionMisses(11, procRoot), 0);
    proc(12, { "3": { link: "anon_inode:bpf-prog", info: "prog_type:\t5\nprog_id:\t8\n" } });
    assert.equal(await recursionMisses(12, procRoot), 0);
  });
});
