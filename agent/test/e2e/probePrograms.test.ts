// Every probe variant compiles on this machine's bpftrace, rendered as the
// agent renders it (targets, IPv4 and IPv6 endpoints) and given the kernel's
// BTF cut as the agent gives it, with no warnings.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { parseEndpoint } from "../../src/sources/probe/endpointKey.ts";
import { bpftraceEnv, kernelBtf, PROBE_VARIANTS, renderProgram } from "../../src/sources/probe/probeProgram.ts";
import { agentEnv } from "./support/agentProcess.ts";
import { assertKernelRequirements, skipWithoutKernel } from "./support/kernelRequirements.ts";

describe("probe programs", { skip: skipWithoutKernel(), timeout: 120_000 }, () => {
  for (const variant of PROBE_VARIANTS) {
    it(`${variant}: dry-run compiles with bpftrace -d, also watching execs`, () => {
      dryRunCompiles(variant, {});
    });
  }
  it("sockets without its send hook (every target followed per request): dry-run compiles with bpftrace -d", () => {
    dryRunCompiles("sockets", { requestLevel: [1, 4194304], execWatch: false, sendHook: false });
  });
});

/** The program as the agent renders it with `state` compiles with bpftrace -d, without a warning. */
function dryRunCompiles(variant: (typeof PROBE_VARIANTS)[number], state: { requestLevel?: number[]; execWatch?: boolean; sendHook?: boolean }): void {
  assertKernelRequirements();
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-bt-"));
  try {
    const file = path.join(dir, `${variant}.bt`);
    writeFileSync(
      file,
      renderProgram(variant, {
        targets: [1, 4194304],
        endpoints: ["10.96.0.1:443", "[fd00::1]:6443"].map(parseEndpoint),
        execWatch: true,
        unansweredMinBytes: 100,
        ...state,
      }),
    );
    const btf = kernelBtf();
    assert.equal(btf.error, null, "the kernel's BTF is cut for bpftrace");
    assert.ok(btf.cutBytes! < btf.kernelBytes! / 10, `the cut (${btf.cutBytes} bytes) is a small part of the kernel's BTF (${btf.kernelBytes})`);
    // The Go program's reads of the kernel's socket (go_http2.bt, NO CASTS): a socket's state sits right after its family.
    if (typeof btf.offsets === "string") assert.fail(`the kernel's field offsets: ${btf.offsets}`);
    assert.equal(btf.offsets["sock.__sk_common.skc_state"], btf.offsets["sock.__sk_common.skc_family"]! + 2);
    const result = spawnSync("bpftrace", ["-d", file, "0", "0"], { encoding: "utf8", maxBuffer: 256 << 20, env: { ...process.env, ...bpftraceEnv() } });
    assert.equal(result.status, 0, `bpftrace -d failed: ${result.stderr}`);
    const stderr = result.stderr;
    const warnings = stderr.split("\n").filter((l) => /warning|error/i.test(l) && !/RLIMIT_MEMLOCK|available_filter_functions/.test(l));
    assert.deepEqual(warnings, []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("lostwrite probe and doctor", { skip: skipWithoutKernel(), timeout: 120_000 }, () => {
  const cli = (args: string[]) =>
    spawnSync(path.resolve("node_modules/.bin/node"), [path.resolve("agent/src/cli.ts"), ...args], { encoding: "utf8", env: agentEnv() });

  it("prints the rendered program for the given targets and endpoints", () => {
    assertKernelRequirements();
    const result = cli(["probe", "--target-pid", String(process.pid), "--apiserver", "10.96.0.1:443", "--apiserver", "[fd00::1]:6443"]);
    assert.equal(result.status, 0, result.stderr);
    assert.match(result.stdout, new RegExp(`@targets\\[\\(uint64\\)${process.pid}\\] = 1;`));
    assert.match(result.stdout, /@api4\[\(uint64\)16801802, \(uint64\)443\] = 1; \/\/ 10\.96\.0\.1:443/);
    assert.match(result.stdout, /@api6\[.*\(uint64\)6443\] = 1; \/\/ \[fd00::1\]:6443/);
    assert.match(result.stdout, /tracepoint:sock:sock_send_length/);
  });

  it("doctor passes on this machine and names each check", () => {
    assertKernelRequirements();
    const result = cli(["doctor"]);
    assert.equal(result.status, 0, result.stdout);
    for (const check of ["tracefs", "BTF", "bpftrace", "probe variant", "capabilities", "cgroup layout"]) {
      assert.match(result.stdout, new RegExp(`^ok\\s+${check}`, "m"));
    }
  });
});
