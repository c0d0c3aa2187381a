// bpftrace's compiler paged out once a program attached: which mappings are
// asked for, the turns bpftrace processes take to compile, and what a helper
// that is refused does. The helper and /proc are stand-ins here; the real
// ones on a real bpftrace: agent/test/e2e/compilerPages.test.ts.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { CompilerPages, compilerRanges } from "../../../../src/sources/probe/compilerPages.ts";
import { AgentMetrics } from "../../../../src/telemetry/metrics.ts";

// As /proc/<pid>/maps shows a bpftrace (Debian 12), trimmed.
const MAPS = `55d0c8a00000-55d0c8a5e000 r--p 00000000 08:01 1311 /usr/bin/bpftrace
55d0c8a5e000-55d0c8c2d000 r-xp 0005e000 08:01 1311 /usr/bin/bpftrace
55d0ca1f4000-55d0ca9b2000 rw-p 00000000 00:00 0 [heap]
7f1a10000000-7f1a10021000 rw-p 00000000 00:00 0
7f1a2a400000-7f1a2b0f2000 r--p 00000000 08:01 2040 /usr/lib/x86_64-linux-gnu/libLLVM-14.so.1
7f1a2b0f2000-7f1a2e54a000 r-xp 00cf2000 08:01 2040 /usr/lib/x86_64-linux-gnu/libLLVM-14.so.1
7f1a2e54a000-7f1a2f6d8000 r--p 0414a000 08:01 2040 /usr/lib/x86_64-linux-gnu/libLLVM-14.so.1
7f1a2f6d8000-7f1a2fb3e000 rw-p 052d8000 08:01 2040 /usr/lib/x86_64-linux-gnu/libLLVM-14.so.1
7f1a30000000-7f1a30400000 r--p 00000000 08:01 2051 /usr/lib/x86_64-linux-gnu/libclang-14.so.13
7f1a30400000-7f1a31a00000 r-xp 00400000 08:01 2051 /usr/lib/x86_64-linux-gnu/libclang-14.so.13
7f1a31a00000-7f1a31b00000 rw-p 01a00000 08:01 2051 /usr/lib/x86_64-linux-gnu/libclang-14.so.13
7f1a32000000-7f1a32028000 r--p 00000000 08:01 2100 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1a32028000-7f1a3219d000 r-xp 00028000 08:01 2100 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1a33000000-7f1a33001000 r--p 00000000 08:01 2200 /opt/tools/not-libLLVM-14.so.1
7ffd1c5e0000-7ffd1c601000 rw-p 00000000 00:00 0 [stack]
7ffd1c7f2000-7ffd1c7f6000 r--p 00000000 00:00 0 [vvar]
`;

const LLVM_AND_CLANG = ["7f1a2a400000-7f1a2b0f2000", "7f1a2b0f2000-7f1a2e54a000", "7f1a2e54a000-7f1a2f6d8000", "7f1a30000000-7f1a30400000", "7f1a30400000-7f1a31a00000"];

describe("compilerRanges", { timeout: 10_000 }, () => {
  it("asks for LLVM's and clang's code and read-only data, not their written pages, other files, or anonymous memory", () => {
    assert.deepEqual(compilerRanges(MAPS), LLVM_AND_CLANG);
  });

  it("finds nothing in a process without the compiler, or in an empty maps file", () => {
    assert.deepEqual(compilerRanges(MAPS.split("\n").filter((line) => !/lib(LLVM|clang)/.test(line)).join("\n")), []);
    assert.deepEqual(compilerRanges(""), []);
  });
});

describe("CompilerPages", { timeout: 10_000 }, () => {
  const procRoot = mkdtempSync(path.join(os.tmpdir(), "lostwrite-compiler-pages-"));
  after(() => rmSync(procRoot, { recursive: true, force: true }));

  function proc(pid: number, rssKib: number): void {
    mkdirSync(path.join(procRoot, String(pid)), { recursive: true });
    writeFileSync(path.join(procRoot, String(pid), "maps"), MAPS);
    setRss(pid, rssKib);
  }
  function setRss(pid: number, rssKib: number): void {
    writeFileSync(path.join(procRoot, String(pid), "smaps_rollup"), `55d0c8a00000-7ffd1c601000 ---p 00000000 00:00 0 [rollup]\nRss:            ${rssKib} kB\nPss:            ${rssKib} kB\n`);
  }
  const silent = { info: () => {}, warn: () => {} };
  const gauge = async (metrics: AgentMetrics, name: string, labels = ""): Promise<number> => {
    const text = await metrics.registry.metrics();
    return Number(new RegExp(`^${name}${labels.replace(/[{}]/g, "\\$&")} (\\S+)$`, "m").exec(text)?.[1]);
  };

  it("pages out an attached bpftrace's compiler, counts what it gave back, and pages out every attached one again at the next attach", async () => {
    proc(101, 90_000);
    proc(102, 88_000);
    const calls: string[][] = [];
    const metrics = new AgentMetrics();
    const pages = new CompilerPages({
      helper: "/pageout", metrics, log: silent, procRoot,
      runHelper: (helper, args) => {
        assert.equal(helper, "/pageout");
        calls.push(args);
        setRss(Number(args[0]), 37_000);
        return Promise.resolve();
      },
    });
    await pages.attached(101);
    assert.deepEqual(calls, [["101", ...LLVM_AND_CLANG]]);
    assert.equal(await gauge(metrics, "lostwrite_probe_compiler_paged_out_bytes_total"), (90_000 - 37_000) * 1024);
    await pages.attached(102);
    assert.deepEqual(calls.slice(1).map((args) => args[0]), ["101", "102"], "both attached processes paged out at the second attach");
    assert.equal(await gauge(metrics, "lostwrite_probe_compiler_paged_out_bytes_total"), (90_000 - 37_000 + 88_000 - 37_000) * 1024);
    assert.equal(await gauge(metrics, "lostwrite_probe_compiler_page_outs_total", '{result="done"}'), 3);
    pages.exited(101);
    await pages.attached(102);
    assert.deepEqual(calls.slice(3).map((args) => args[0]), ["102"], "an exited bpftrace is not asked for again");
  });

  it("lets one bpftrace compile at a time, in the order they asked", async () => {
    const pages = new CompilerPages({ helper: "/pageout", metrics: new AgentMetrics(), log: silent, procRoot, runHelper: () => Promise.resolve() });
    const order: string[] = [];
    const first = await pages.turn();
    const second = pages.turn().then((end) => (order.push("second"), end));
    const third = pages.turn().then((end) => (order.push("third"), end));
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(order, [], "nobody compiles beside the first");
    first();
    first();
    const endSecond = await second;
    assert.deepEqual(order, ["second"], "an end called twice passes the turn once");
    endSecond();
    (await third)();
    assert.deepEqual(order, ["second", "third"]);
    const fourth = await pages.turn();
    fourth();
  });

  it("lets a compile nobody waits for (a merge) go after every other waiting, even one that asked later", async () => {
    const pages = new CompilerPages({ helper: "/pageout", metrics: new AgentMetrics(), log: silent, procRoot, runHelper: () => Promise.resolve() });
    const order: string[] = [];
    const first = await pages.turn();
    const merge = pages.turn(true).then((end) => (order.push("merge"), end));
    const newFile = pages.turn().then((end) => (order.push("new file"), end));
    first();
    (await newFile)();
    (await merge)();
    assert.deepEqual(order, ["new file", "merge"]);
  });

  it("passes the turn on after the limit, so a compile that hangs holds nobody up", async () => {
    const pages = new CompilerPages({ helper: "/pageout", metrics: new AgentMetrics(), log: silent, procRoot, runHelper: () => Promise.resolve(), turnLimitMs: 20 });
    await pages.turn();
    const next = await pages.turn();
    next();
  });

  it("without the helper, nobody waits and nothing is asked", async () => {
    const infos: string[] = [];
    const pages = new CompilerPages({ helper: null, metrics: new AgentMetrics(), log: { info: (message) => infos.push(message), warn: () => {} }, procRoot, runHelper: () => assert.fail("helper run") });
    assert.equal(pages.enabled, false);
    await pages.turn();
    await pages.turn();
    proc(103, 90_000);
    await pages.attached(103);
    assert.match(infos.join("\n"), /not built/);
  });

  it("a helper the kernel refuses (no CAP_SYS_NICE) turns page-out off: counted, said once, and the waiting compile goes ahead", async () => {
    proc(104, 90_000);
    proc(105, 90_000);
    const warnings: { message: string; fields: unknown }[] = [];
    const metrics = new AgentMetrics();
    let runs = 0;
    const pages = new CompilerPages({
      helper: "/pageout", metrics, procRoot,
      log: { info: () => {}, warn: (message, fields) => warnings.push({ message, fields }) },
      runHelper: () => {
        runs++;
        return Promise.reject(Object.assign(new Error("Command failed"), { code: 3, stderr: "lostwrite-pageout: pid 104: process_madvise: operation not permitted (needs CAP_SYS_NICE)\n" }));
      },
    });
    const end = await pages.turn();
    const waiting = pages.turn();
    await pages.attached(104);
    (await waiting)();
    end();
    assert.equal(pages.enabled, false);
    assert.equal(await gauge(metrics, "lostwrite_probe_compiler_page_outs_total", '{result="failed"}'), 1);
    assert.equal(warnings.length, 1);
    assert.match(JSON.stringify(warnings[0]), /CAP_SYS_NICE/);
    await pages.attached(105);
    assert.equal(runs, 1, "not asked again");
  });

  it("a helper that fails otherwise is counted and asked again at the next attach", async () => {
    proc(106, 90_000);
    const metrics = new AgentMetrics();
    let runs = 0;
    const pages = new CompilerPages({
      helper: "/pageout", metrics, log: silent, procRoot,
      runHelper: () => (++runs === 1 ? Promise.reject(Object.assign(new Error("Command failed"), { code: 1, stderr: "process_madvise: cannot allocate memory" })) : Promise.resolve()),
    });
    await pages.attached(106);
    assert.equal(pages.enabled, true);
    await pages.attached(106);
    assert.equal(runs, 2);
    assert.equal(await gauge(metrics, "lostwrite_probe_compiler_page_outs_total", '{result="failed"}'), 1);
    assert.equal(await gauge(metrics, "lostwrite_probe_compiler_page_outs_total", '{result="done"}'), 1);
  });

  it("a bpftrace gone before its page-out is forgotten, not a failure", async () => {
    const metrics = new AgentMetrics();
    const pages = new CompilerPages({ helper: "/pageout", metrics, log: silent, procRoot, runHelper: () => assert.fail("helper run") });
    await pages.attached(999);
    assert.equal(await gauge(metrics, "lostwrite_probe_compiler_page_outs_total", '{result="failed"}'), 0);
  });
});
