// A bpftrace killed by SIGKILL leaves its uprobe events in tracefs, named
// from the probed path and its pid; an agent in a pod, pid 1 there, probes
// the same /proc/1/fd/N paths with bpftrace pids that come out the same run
// after run, and its program then fails with "File exists". The agent
// removes what a gone bpftrace left on its own descriptors, and leaves a
// running bpftrace's events alone. Here the test process plays the agent:
// its own /proc/PID/fd/N, a real bpftrace, the real tracefs.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { TRACEFS_ROOTS } from "../../src/sources/probe/probeProgram.ts";
import { removeStaleUprobeEvents } from "../../src/sources/probe/staleUprobeEvents.ts";
import { waitFor } from "./support/agentProcess.ts";
import { assertKernelRequirements, skipWithoutKernel } from "./support/kernelRequirements.ts";

/** A library every machine has, and a function of it nothing here calls. */
const LIBRARY = "/lib/x86_64-linux-gnu/libc.so.6";
const SYMBOL = "gnu_get_libc_version";

function uprobeEvents(): string {
  const root = TRACEFS_ROOTS.find((dir) => {
    try {
      readFileSync(`${dir}/uprobe_events`);
      return true;
    } catch {
      return false;
    }
  });
  assert.ok(root, `no uprobe_events under ${TRACEFS_ROOTS.join(" or ")}`);
  return readFileSync(`${root}/uprobe_events`, "utf8");
}

/**
 * A bpftrace with one uprobe on `file`, once it attached, without
 * CAP_SYS_ADMIN as in the DaemonSet: it then makes its uprobes through
 * tracefs's uprobe_events (the perf uprobe PMU needs CAP_SYS_ADMIN).
 */
async function attach(file: string): Promise<ChildProcess> {
  const child = spawn("setpriv", ["--pdeathsig", "KILL", "--bounding-set", "-sys_admin", "bpftrace", "-e", `uprobe:${file}:${SYMBOL} { @n = count(); }`], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
  await waitFor(`bpftrace attached to ${file}`, () => out.includes("Attaching 1 probe"), 60_000);
  return child;
}

describe("uprobe events a killed bpftrace left behind", { skip: skipWithoutKernel(), timeout: 180_000 }, () => {
  let killedOn: FileHandle;
  let liveOn: FileHandle;
  let live: ChildProcess | undefined;

  before(async () => {
    assertKernelRequirements();
    killedOn = await open(LIBRARY, "r");
    liveOn = await open(LIBRARY, "r");
  });

  after(async () => {
    live?.kill("SIGKILL");
    await killedOn?.close();
    await liveOn?.close();
  });

  it("are removed when they are on the agent's descriptors, and a running bpftrace's stay", async () => {
    const killedPath = `/proc/${process.pid}/fd/${killedOn.fd}`;
    const livePath = `/proc/${process.pid}/fd/${liveOn.fd}`;
    const killed = await attach(killedPath);
    killed.kill("SIGKILL");
    await new Promise((resolve) => killed.once("exit", resolve));
    assert.ok(uprobeEvents().includes(`${killedPath}:`), `SIGKILL left the event on ${killedPath} in tracefs:\n${uprobeEvents()}`);
    live = await attach(livePath);

    const removed = await removeStaleUprobeEvents(process.pid, TRACEFS_ROOTS);

    assert.ok(removed >= 1, `removed ${removed}`);
    const left = uprobeEvents();
    assert.ok(!left.includes(`${killedPath}:`), `the killed bpftrace's event is gone:\n${left}`);
    assert.ok(left.includes(`${livePath}:`), `the running bpftrace's event stays:\n${left}`);
    live.kill("SIGINT");
    await new Promise((resolve) => live!.once("exit", resolve));
    assert.ok(!uprobeEvents().includes(`${livePath}:`), "a bpftrace stopped as usual takes its own event away");
  });
});
