// bpftrace's compiler paged out once a program attached: which mappings are
// asked for, the turns bpftrace processes take to compile, and what a helper
// that is refused does. The helper and /proc are stand-ins here; the real
// ones on a real bpftrace: agent/test/e2e/compilerPages.test.ts.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { CompilerPages, compilerMappings } from "../../../../src/sources/probe/compilerPages.ts";
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

/** MAPS as smaps shows it: each compiler mapping with `compilerKib` resident, 64 KiB of it anonymous; every other mapping 100 KiB. */
function smaps(compilerKib: number): string {
  return MAPS.trim()
    .split("\n")
    .map((line) => {
      const compiler = LLVM_AND_CLANG.includes(line.split(" ")[0]!);
      return `${line}\nSize:            9999 kB\nRss:             ${compiler ? compilerKib : 100} kB\nPss:             1 kB\nAnonymous:       ${compiler ? 64 : 100} kB\nVmFlags: rd mr mw me\n`;
    })
    .join("");
}

describe("compilerMappings", { timeout: 10_000 }, () => {
  it("asks for LLVM's and clang's code and read-only data, not their written pages, other files, or anonymous memory", () => {
    assert.deepEqual(compilerMappings(MAPS), { ranges: LLVM_AND_CLANG, residentBytes: 0 });
  });

  it("counts the files' own pages resident in those mappings, not their anonymous ones", () => {
    assert.deepEqual(compilerMappings(smaps(1088)), { ranges: LLVM_AND_CLANG, residentBytes: 5 * (1088 - 64) * 1024 });
  });

  it("finds nothing in a process without the compiler, or in an empty file", () => {
    assert.deepEqual(compilerMappings(MAPS.split("\n").filter((line) => !/lib(LLVM|clang)/.test(line)).join("\n")), { ranges: [], residentBytes: 0 });
    assert.deepEqual(compilerMappings(""), { ranges: [], residentBytes: 0 });
  });
});

describe("CompilerPages", { timeout: 10_000 }, () => {
  const procRoot = mkdtempSync(path.join(os.tmpdir(), "lostwrite-compiler-pages-"));
  after(() => rmSync(procRoot, { recursive: true, force: true }));

  /** A process whose compiler mappings hold `compilerKib` each (64 of it anonymous). */
  function proc(pid: number, compilerKib: number): void {
    mkdirSync(path.join(procRoot, String(pid)), { recursive: true });
    setCompiler(pid, compilerKib);
  }
  function setCompiler(pid: number, compilerKib: number): void {
    writeFileSync(path.join(procRoot, String(pid), "smaps"), smaps(compilerKib));
  }
  const silent = { info: () => {}, warn: () => {} };
  const gauge = async (metrics: AgentMetrics, name: string, labels = ""): Promise<number> => {
    const text = await metrics.registry.metrics();
    return Number(new RegExp(`^${name}${labels.replace(/[{}]/g, "\\$&")} (\\S+)$`, "m").exec(text)?.[1]);
  };

  it("pages out an attached bpftrace's compiler, counts what it gave back, and pages out every attached one again at the next attach", async () => {
    proc(101, 14_000);
    proc(102, 12_000);
    const calls: string[][] = [];
    const metrics = new AgentMetrics();
    const pages = new CompilerPages({
      helper: "/pageout", metrics, log: silent, procRoot,
      runHelper: (helper, args) => {
        assert.equal(helper, "/pageout");
        calls.push(args);
        // What another process maps too stays: 2.5 MiB in all here, little enough.
        setCompiler(Number(args[0]), 64 + 512);
        return Promise.resolve();
      },
    });
    await pages.attached(101);
    assert.deepEqual(calls, [["101", ...LLVM_AND_CLANG]]);
    const paged = (kib: number): number => 5 * (kib - 512 - 64) * 1024;
    assert.equal(await gauge(metrics, "lostwrite_probe_compiler_paged_out_bytes_total"), paged(14_000));
    // 101 had little left: not asked again. What 102's compile touched of it (another process's pages) is asked again.
    setCompiler(101, 3000);
    await pages.attached(102);
    assert.deepEqual(calls.slice(1).map((args) => args[0]), ["101", "102"], "every attached process paged out again at an attach");
    assert.equal(await gauge(metrics, "lostwrite_probe_compiler_paged_out_bytes_total"), paged(14_000) + paged(3000) + paged(12_000));
    await pages.attached(102);
    assert.equal(calls.length, 3, "nothing left resident: nobody asked");
    assert.equal(await gauge(metrics, "lostwrite_probe_compiler_page_outs_total", '{result="done"}'), 3);
    pages.exited(101);
    setCompiler(101, 14_000);
    setCompiler(102, 14_000);
    await pages.attached(102);
    assert.deepEqual(calls.slice(3).map((args) => args[0]), ["102"], "an exited bpftrace is not asked for again");
  });

  it("asks again later while pages another process maps too are left resident", async () => {
    proc(110, 14_000);
    const calls: string[] = [];
    let asked = (): void => {};
    const pages = new CompilerPages({
      helper: "/pageout", metrics: new AgentMetrics(), log: silent, procRoot, retryMs: 10,
      runHelper: (_helper, args) => {
        calls.push(args[0]!);
        // The first time another process still maps most of it; then it went.
        setCompiler(110, calls.length === 1 ? 10_000 : 64);
        asked();
        return Promise.resolve();
      },
    });
    const askedAgain = new Promise<void>((resolve) => (asked = () => calls.length === 2 && resolve()));
    await pages.attached(110);
    await askedAgain;
    assert.deepEqual(calls, ["110", "110"]);
    pages.exited(110);
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
    proc(103, 14_000);
    await pages.attached(103);
    assert.match(infos.join("\n"), /not built/);
  });

  it("a helper the kernel refuses (no CAP_SYS_NICE) turns page-out off: counted, said once, and the waiting compile goes ahead", async () => {
    proc(104, 14_000);
    proc(105, 14_000);
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
    proc(106, 14_000);
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
