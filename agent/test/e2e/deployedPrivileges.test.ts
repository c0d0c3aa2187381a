// Every capability and every volume mount of the DaemonSet, justified on the
// real kernel. The agent runs in the manifest's shape (support/deployedShape.ts:
// own PID namespace, the container's own /sys, the manifest's mounts and
// capabilities, read-only root), with its targets running as another uid
// (65534), as operators in other pods do. Then, for each grant, the same shape
// without it, and the failure that grant prevents is asserted.
//
// The tables below say why each grant is there. They must name exactly what
// the manifest grants: a new capability or mount needs a row here, and a
// test that fails without it.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { chmod, mkdtemp, rm, symlink } from "node:fs/promises";
import { realpathSync } from "node:fs";
import os from "node:os";
import net from "node:net";
import path from "node:path";
import { promisify } from "node:util";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { buildGoOperator } from "../../../testbed/go-operator/build.ts";
import { goUnavailable } from "../../../testbed/goBuild.ts";
import { agentEnv, startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { compilerResidentMiB } from "./support/bpftraceMemory.ts";
import { daemonSetShape, hostPidOfShapedAgent, inDeployedShape, shapeWithout, type DaemonSetShape } from "./support/deployedShape.ts";
import { faultyApiserver, portOf } from "./support/faultyApiserver.ts";
import { assertKernelRequirements, missingKernelRequirements } from "./support/kernelRequirements.ts";

const execFileAsync = promisify(execFile);
const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, "../../..");
const NODE = path.join(repoRoot, "node_modules/.bin/node");
const SHORT_LIVED = path.join(here, "clients/lw_short_lived.py");
/** The uid operators run as here: not the agent's. */
const OTHER_UID = "65534";

interface Need {
  /** What the agent does with it. */
  why: string;
  /** What fails without it, in the agent's or doctor's own words. */
  without: RegExp;
  /** How the failure shows: doctor's real checks, the agent itself, or the memory its bpftrace keeps (the agent works on). */
  seenBy: "doctor" | "agent" | "memory";
}

const CAPABILITIES: Record<string, Need> = {
  bpf: { why: "bpf(): bpftrace creates its maps and loads its programs", without: /FAIL {2}bpftrace attaches: .*(Operation not permitted|required permissions)/, seenBy: "doctor" },
  perfmon: {
    why: "perf_event_open(): bpftrace attaches its programs to tracepoints and opens its output buffer",
    without: /FAIL {2}bpftrace attaches: .*(perf_event_open|perf buffer|Permission denied)/i,
    seenBy: "doctor",
  },
  sys_ptrace: {
    why: "the Go probe opens /host/proc/<pid>/exe of an operator running as another uid (ptrace read access)",
    without: /cannot read a target's executable.*EACCES/,
    seenBy: "agent",
  },
  // Kernels >= 5.11 charge BPF memory to the cgroup, not to RLIMIT_MEMLOCK,
  // and this machine cannot grant it anyway: see its test below.
  sys_resource: { why: "setrlimit(RLIMIT_MEMLOCK): kernels 5.8-5.10 charge BPF maps to it", without: /RLIMIT_MEMLOCK|Operation not permitted/, seenBy: "doctor" },
  sys_nice: {
    why: "process_madvise(): the agent pages each bpftrace's compiler out once its program is attached",
    without: /cannot page out bpftrace's compiler.*CAP_SYS_NICE/,
    seenBy: "memory",
  },
};

/** By volume name. */
const MOUNTS: Record<string, Need> = {
  "host-proc": {
    why: "the host's /proc: other pods' processes, their cgroup (container), NSpid, comm; the agent's own host pid",
    without: /FAIL {2}agent pid: proc-root: cannot read \/host\/proc\/self\/status/,
    seenBy: "doctor",
  },
  tracefs: { why: "tracepoint ids and formats; the container's /sys has an empty directory there", without: /FAIL {2}bpftrace attaches: /, seenBy: "doctor" },
  tmp: { why: "bpftrace's program files, on a read-only root filesystem", without: /EROFS: read-only file system, mkdtemp '\/tmp\//, seenBy: "agent" },
  // Without it nothing fails: the Go probe of a binary with symbols is placed
  // at the function entries instead, which cost more (see its test below).
  "debug-build-ids": {
    why: "the debug file naming the Go probe's points past the stack checks of a binary with symbols, found by its build id",
    without: /Go binary with symbols: its uprobes go at the function entries/,
    seenBy: "agent",
  },
};

/** Host mounts that are not read-only, by volume name. */
const WRITABLE: Record<string, Need> = {
  tracefs: {
    why: "bpftrace creates the Go probe's uprobes through uprobe_events (its perf uprobe PMU path only with CAP_SYS_ADMIN)",
    without: /uprobe_events\): Read-only file system/,
    seenBy: "agent",
  },
};

function skipReason(): string | false {
  if (process.env.CI === "true") return false;
  const reasons = [...missingKernelRequirements(), goUnavailable() ?? ""].filter(Boolean);
  return reasons.length ? reasons.join("; ") : false;
}

function kernelAtLeast(major: number, minor: number): boolean {
  const [a = 0, b = 0] = os.release().split(/[.-]/).map(Number);
  return a > major || (a === major && b >= minor);
}

describe("every capability and mount of the DaemonSet is needed, and is enough", { skip: skipReason(), timeout: 540_000 }, () => {
  const shape = daemonSetShape();
  let dir: string;
  let operator: ChildProcess;
  let apiserver: net.Server;

  before(async () => {
    assertKernelRequirements();
    const go = goUnavailable();
    if (go !== null) throw new Error(`e2e test cannot run: ${go}`);
    // Not under /tmp (the shape mounts the pod's own there), and readable by the other uid.
    dir = await mkdtemp("/var/tmp/lostwrite-privileges-");
    await chmod(dir, 0o755);
    const binary = await buildGoOperator(dir, { stripped: true });
    await chmod(binary, 0o755);
    await symlink(realpathSync("/usr/bin/python3"), path.join(dir, "lw-short"));
    apiserver = await faultyApiserver();
    // The Go operator as another uid, its apiserver unreachable: it keeps
    // retrying, which is all the Go probe needs to find and attach to it.
    operator = spawn("setpriv", ["--reuid", OTHER_UID, "--regid", OTHER_UID, "--clear-groups", binary, "--server", "https://127.0.0.1:1", "--namespace", "privileges"], {
      stdio: "ignore",
    });
  });

  after(async () => {
    operator?.kill("SIGKILL");
    apiserver?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const agentArgs = (): string[] => ["--target-comm", "^(go-operator|lw-short)$", "--apiserver", `127.0.0.1:${portOf(apiserver)}`, "--correlation-window", "300ms", "--span-grace", "0s"];

  /** The agent in `variant`: its log, whether it started, and whether the Go probe attached to the other uid's operator. */
  async function agentIn(variant: DaemonSetShape, until: RegExp | null, args = agentArgs()): Promise<{ started: boolean; goAttached: boolean; log: string; agent?: AgentProcess }> {
    let agent: AgentProcess;
    try {
      agent = await startAgentProcess(args, { LOSTWRITE_PROC_ROOT: variant.procRoot }, { wrap: (argv) => inDeployedShape(argv, variant) });
    } catch (error) {
      return { started: false, goAttached: false, log: String(error) };
    }
    const attached = async (): Promise<boolean> => (await agent.metric("lostwrite_go_probes_attached")) === 1;
    await waitFor("the Go probe to attach, or the failure", async () => (await attached()) || (until !== null && until.test(agent.stderr.join("\n"))), 30_000).catch(() => undefined);
    return { started: true, goAttached: await attached(), log: agent.stderr.join("\n"), agent };
  }

  async function doctorIn(variant: DaemonSetShape): Promise<string> {
    const argv = inDeployedShape([NODE, path.join(repoRoot, "agent/bin/lostwrite.js"), "doctor"], variant);
    const result = await execFileAsync(argv[0]!, argv.slice(1), { env: agentEnv({ LOSTWRITE_PROC_ROOT: variant.procRoot }) }).catch(
      (error: { stdout?: string; stderr?: string }) => ({ stdout: error.stdout ?? "", stderr: error.stderr ?? "" }),
    );
    return result.stdout + result.stderr;
  }

  /** The compiler's resident MiB in each of the agent's bpftrace processes. */
  const compilerOf = (agent: AgentProcess): Record<number, number> => compilerResidentMiB(hostPidOfShapedAgent(agent.child.pid!)!);

  async function assertFailsWithout(variant: DaemonSetShape, need: Need): Promise<void> {
    if (need.seenBy === "doctor") {
      assert.match(await doctorIn(variant), need.without);
      return;
    }
    if (need.seenBy === "memory") {
      const run = await agentIn(variant, null);
      try {
        assert.equal(run.goAttached, true, `nothing but memory depends on it:\n${run.log.slice(-3000)}`);
        const agent = run.agent!;
        await waitFor("the agent to say it cannot page out", () => need.without.test(agent.stderr.join("\n")), 30_000);
        assert.equal(await agent.metric("lostwrite_probe_compiler_page_outs_total", { result: "failed" }), 1);
        // Each bpftrace ran some 70 MiB of it to compile, and keeps it.
        const resident = compilerOf(agent);
        assert.ok(Object.keys(resident).length === 2 && Object.values(resident).every((mib) => mib >= 20), `compiler resident (MiB): ${JSON.stringify(resident)}`);
      } finally {
        await run.agent?.stop();
      }
      return;
    }
    const run = await agentIn(variant, need.without);
    try {
      assert.equal(run.goAttached, false, "the Go probe attached anyway");
      assert.match(run.log, need.without);
    } finally {
      await run.agent?.stop();
    }
  }

  it("the tables name exactly what the manifest grants", () => {
    assert.deepEqual(Object.keys(CAPABILITIES).sort(), [...shape.capabilities].sort());
    assert.deepEqual(Object.keys(MOUNTS).sort(), shape.mounts.map((m) => m.name).sort());
    assert.deepEqual(Object.keys(WRITABLE).sort(), shape.mounts.filter((m) => m.hostPath !== null && !m.readOnly).map((m) => m.name).sort());
  });

  it("with all of it: the Go probe follows another uid's operator, and another uid's failed write is counted", async () => {
    const run = await agentIn(shape, null);
    try {
      assert.ok(run.started, run.log);
      assert.equal(run.goAttached, true, `the Go probe did not attach through /host/proc/<pid>/exe:\n${run.log.slice(-3000)}`);
      // The socket probe and the Go program started together and compiled in
      // turn: each one's compiler is paged out, none kept by the other's.
      const paged = (resident: Record<number, number>): boolean => Object.keys(resident).length === 2 && Object.values(resident).every((mib) => mib < 4);
      await waitFor("both bpftrace processes' compiler paged out", () => paged(compilerOf(run.agent!)), 30_000).catch(() => {
        throw new Error(`compiler resident (MiB): ${JSON.stringify(compilerOf(run.agent!))}; agent log:\n${run.agent!.stderr.slice(-20).join("\n")}`);
      });
      assert.equal(await run.agent!.metric("lostwrite_probe_compiler_page_outs_total", { result: "failed" }), 0);
      assert.ok((await run.agent!.metric("lostwrite_probe_compiler_paged_out_bytes_total")) > 2 * 40 * 2 ** 20);
      // and the probes still count, paged out:
      const client = spawn("setpriv", ["--reuid", OTHER_UID, "--regid", OTHER_UID, "--clear-groups", path.join(dir, "lw-short"), SHORT_LIVED, String(portOf(apiserver)), "50", "300"], { stdio: "ignore" });
      await new Promise((resolve) => client.once("exit", resolve));
      const agent = run.agent!;
      await waitFor("the other uid's loss", () => agent.events.some((e) => e.pid === client.pid), 15_000);
      assert.ok(["write_failed", "connection_reset"].includes(agent.events.find((e) => e.pid === client.pid)!.cause));
    } finally {
      await run.agent?.stop();
    }
  });

  for (const [capability, need] of Object.entries(CAPABILITIES)) {
    const onlyOlderKernels = capability === "sys_resource" && kernelAtLeast(5, 11);
    const outcome = onlyOlderKernels ? "nothing fails on this kernel (>= 5.11)" : "it fails";
    it(`without ${capability.toUpperCase()} (${need.why}): ${outcome}`, async () => {
      if (onlyOlderKernels) {
        // Nothing to show on this kernel: the memlock limit no longer
        // applies to BPF. The grant stays for 5.8-5.10 (the oldest kernels
        // with CAP_BPF), where bpftrace raises the limit at start.
        assert.doesNotMatch(await doctorIn(shapeWithout(shape, { capability })), /FAIL {2}bpftrace attaches/);
        return;
      }
      await assertFailsWithout(shapeWithout(shape, { capability }), need);
    });
  }

  it(`without the debug-build-ids mount (${MOUNTS["debug-build-ids"]!.why}): such a binary is probed at its function entries, and the agent says so`, async () => {
    // The operator of this file is stripped; one that keeps its symbols, as go build leaves it, runs for this case only.
    // A build id of its own: no debug file another agent on the machine wrote for the same build exists for it.
    const withSymbols = await buildGoOperator(dir, { stripped: false, buildId: randomBytes(20).toString("hex") });
    await chmod(withSymbols, 0o755);
    const symbolsOperator = spawn("setpriv", ["--reuid", OTHER_UID, "--regid", OTHER_UID, "--clear-groups", withSymbols, "--server", "https://127.0.0.1:1", "--namespace", "privileges"], { stdio: "ignore" });
    const need = MOUNTS["debug-build-ids"]!;
    const run = await agentIn(shapeWithout(shape, { mount: "debug-build-ids" }), need.without, ["--target-comm", "^(go-operator|go-operator-sym|lw-short)$", ...agentArgs().slice(2)]);
    try {
      assert.ok(run.started, run.log);
      // The stripped binary's program may attach first (bpftrace processes compile in turn): the one with symbols is said when its program is made.
      await waitFor("both Go programs attached, the one with symbols at its entries", async () => (await run.agent!.metric("lostwrite_go_probes_attached")) === 2, 30_000);
      assert.match(run.agent!.stderr.join("\n"), need.without);
    } finally {
      symbolsOperator.kill("SIGKILL");
      await run.agent?.stop();
    }
  });

  for (const [mount, need] of Object.entries(MOUNTS)) {
    if (mount === "debug-build-ids") continue;
    it(`without the ${mount} mount (${need.why}): it fails`, async () => {
      await assertFailsWithout(shapeWithout(shape, { mount }), need);
    });
  }

  for (const [mount, need] of Object.entries(WRITABLE)) {
    it(`with the ${mount} mount read-only (${need.why}): the Go probe fails`, async () => {
      const readOnly = { ...shape, mounts: shape.mounts.map((m) => (m.name === mount ? { ...m, readOnly: true } : m)) };
      await assertFailsWithout(readOnly, need);
    });
  }
});
