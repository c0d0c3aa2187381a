// The agent in the shape the DaemonSet runs it, on the real kernel: its own
// PID namespace, the host /proc where the manifest mounts it, a read-only
// root (code and probes included), exactly the manifest's capabilities (read
// from the rendered kustomization). In that shape, for processes that start
// after the agent is ready, which in a cluster is most of them:
//   - failed writes into a reset apiserver connection, 9 of 9 counted;
//   - connection deaths: reset and closed unanswered;
//   - Kubernetes: a pod's process labelled from the testbed apiserver's pod
//     list, and the same pod after its container restarted with a new id the
//     pod status does not name yet;
//   - `lostwrite doctor` says the truth about the shape (page-out included), and fails when the
//     proc root is the pod's own.
import assert from "node:assert/strict";
import { execFile, execFileSync, spawn, spawnSync } from "node:child_process";
import { promisify } from "node:util";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, rmdir, symlink } from "node:fs/promises";
import { realpathSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import { agentEnv, startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { faultyApiserver } from "./support/faultyApiserver.ts";
import { bpftraceChildren } from "./support/bpftraceMemory.ts";
import { capabilityNames, daemonSetShape, hostPidOfShapedAgent, inDeployedShape } from "./support/deployedShape.ts";
import { assertKernelRequirements, missingKernelRequirements } from "./support/kernelRequirements.ts";
import { NODE, cgroup2Mount, control, kubernetesSlice, podFor, whyCannotRun } from "./support/kubeFixtures.ts";

const execFileAsync = promisify(execFile);
const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, "../../..");
const SHORT_LIVED = path.join(here, "clients/lw_short_lived.py");
const reasons = [...missingKernelRequirements(), (await whyCannotRun()) ?? ""].filter(Boolean);
if (!existsKubectl()) reasons.push("/usr/bin/kubectl missing: cannot render the DaemonSet");
const skip = reasons.length && process.env.CI !== "true" ? reasons.join("; ") : false;

function existsKubectl(): boolean {
  try {
    execFileSync("/usr/bin/kubectl", ["version", "--client"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** Runs a client to its end; its pid and its one JSON line. */
function run(argv: string[], options: { preExec?: string } = {}): Promise<{ pid: number; out: Record<string, unknown> }> {
  // preExec runs in the process before it becomes the client, like a runtime
  // putting a container's first process into its cgroup before the exec.
  const [file, args] = options.preExec
    ? ["sh", ["-c", `${options.preExec}; exec "$@"`, "sh", ...argv]]
    : [argv[0]!, argv.slice(1)];
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
    child.once("error", reject);
    child.once("exit", (code) => (code === 0 ? resolve({ pid: child.pid!, out: JSON.parse(out) as Record<string, unknown> }) : reject(new Error(`${argv.join(" ")}: exit ${code}`))));
  });
}

describe("the agent in the DaemonSet's shape", { skip, timeout: 300_000 }, () => {
  const shape = daemonSetShape();
  const cleanup: (() => Promise<unknown> | void)[] = [];
  let dir: string;
  let api: Apiserver;
  let server: net.Server;
  let port: number;
  let agent: AgentProcess;
  let client: string;
  let cgroupRoot: string;
  let podUid: string;
  const firstContainer = randomBytes(32).toString("hex");

  /** A container's cgroup as containerd with the systemd driver names it. */
  const containerCgroup = async (containerId: string): Promise<string> => {
    const pod = path.join(cgroupRoot, `kubepods-burstable-pod${podUid.replaceAll("-", "_")}.slice`);
    const container = path.join(pod, `cri-containerd-${containerId}.scope`);
    await mkdir(container, { recursive: true });
    cleanup.push(() => rmdir(container));
    return container;
  };

  before(async () => {
    assertKernelRequirements();
    // Not under /tmp: the shape mounts its own /tmp, as the pod has an emptyDir there.
    dir = await mkdtemp("/var/tmp/lostwrite-shape-");
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    cgroupRoot = path.join((await cgroup2Mount())!, `lostwrite-shape-e2e-${process.pid}.slice`);
    await mkdir(cgroupRoot, { recursive: true });
    api = await startApiserver({ dir: path.join(dir, "apiserver") });
    cleanup.push(() => api.close());
    server = await faultyApiserver();
    cleanup.push(() => void server.close());
    port = (server.address() as net.AddressInfo).port;
    await control(api, "POST", "/objects", kubernetesSlice(["127.0.0.1"], port));
    await control(api, "POST", "/objects", podFor(firstContainer));
    // The apiserver assigns the uid; the pod's cgroup is named after it.
    // Not execFileSync: the testbed apiserver answers from this process's event loop.
    podUid = (await execFileAsync("/usr/bin/kubectl", ["--kubeconfig", api.kubeconfigPath, "-n", "widgets", "get", "pod", "widget-operator-5c7d8f9b4-k2v9x", "-o", "jsonpath={.metadata.uid}"])).stdout;
    assert.match(podUid, /^[0-9a-f-]{36}$/);
    const python = realpathSync("/usr/bin/python3");
    client = path.join(dir, "manager");
    await symlink(python, client);
    await symlink(python, path.join(dir, "lw-short"));
    agent = await startAgentProcess(
      [
        "--kubernetes", "--kubeconfig", api.kubeconfigPath, "--node-name", NODE,
        "--target-comm", "^lw-short$",
        "--rescan-interval", "1m",
        "--correlation-window", "300ms",
      ],
      { KUBERNETES_SERVICE_HOST: "", KUBERNETES_SERVICE_PORT: "", LOSTWRITE_PROC_ROOT: shape.procRoot },
      { wrap: (argv) => inDeployedShape(argv, shape) },
    );
    cleanup.push(() => agent.stop());
  });

  after(async () => {
    for (const step of cleanup.reverse()) await Promise.resolve(step()).catch(() => undefined);
    if (podUid) await rmdir(path.join(cgroupRoot, `kubepods-burstable-pod${podUid.replaceAll("-", "_")}.slice`)).catch(() => undefined);
    await rmdir(cgroupRoot).catch(() => undefined);
  });

  it("runs as the pod does: pid 1 of its own namespace, the manifest's capabilities, a read-only root", async () => {
    const hostPid = hostPidOfShapedAgent(agent.child.pid!);
    assert.ok(hostPid, "the agent runs as pid 1 of a PID namespace of its own");
    const status = await readFile(`/proc/${hostPid}/status`, "utf8");
    // Exactly the manifest's list, less what this host does not have to give (some sandboxes lack SYS_RESOURCE).
    const hostHas = capabilityNames(await readFile("/proc/self/status", "utf8"), "CapBnd");
    assert.deepEqual(capabilityNames(status, "CapBnd"), shape.capabilities.filter((c) => hostHas.includes(c)).sort());
    // Effective: at most those (a host without one of them, as some sandboxes lack SYS_RESOURCE, has fewer).
    for (const cap of capabilityNames(status, "CapEff")) assert.ok(shape.capabilities.includes(cap), `effective ${cap} is not in the manifest`);
    assert.match(status, /^NoNewPrivs:\s*1$/m);
    const mountinfo = await readFile(`/proc/${hostPid}/mountinfo`, "utf8");
    const root = mountinfo.split("\n").find((l) => l.split(" ")[4] === "/");
    assert.match(root ?? "", /\sro[\s,]/, "the root, code and probes included, is read-only");
    const code = mountinfo.split("\n").find((l) => l.split(" ")[4] === repoRoot);
    assert.match(code ?? root ?? "", /\sro[\s,]/, "the code and probes are read-only");
    // The probe reports to this agent: the control channel works in the namespace.
    assert.equal(await agent.metric("lostwrite_probe_control_failures_total"), 0);
  });

  it("counts 9 of 9 failed writes of clients started after it, one event each", async () => {
    const runs = [];
    for (let i = 0; i < 9; i++) runs.push(await run([path.join(dir, "lw-short"), SHORT_LIVED, String(port), "50", "300"]));
    for (const r of runs) assert.ok(["EPIPE", "ECONNRESET"].includes(String(r.out.write_errno)), JSON.stringify(r.out));
    const pids = runs.map((r) => r.pid);
    await waitFor("a loss for each client", () => pids.every((pid) => agent.events.some((e) => e.pid === pid)), 15_000).catch(() => undefined);
    const counted = pids.filter((pid) => agent.events.filter((e) => e.pid === pid).length === 1);
    assert.equal(counted.length, 9, `counted once: ${counted.length} of 9; events ${JSON.stringify(agent.events.map((e) => [e.pid, e.cause]))}`);
  });

  it("tells a reset from a close without an answer", async () => {
    const reset = await run([path.join(dir, "lw-short"), SHORT_LIVED, String(port), "50", "300"]);
    const closed = await run([path.join(dir, "lw-short"), SHORT_LIVED, String(port), "0", "200", "CLOSE"]);
    assert.equal(closed.out.read, "eof");
    await waitFor("both connection deaths", () => [reset.pid, closed.pid].every((pid) => agent.events.some((e) => e.pid === pid)), 15_000);
    assert.deepEqual(agent.events.filter((e) => e.pid === reset.pid).map((e) => e.cause), ["connection_reset"]);
    assert.deepEqual(agent.events.filter((e) => e.pid === closed.pid).map((e) => e.cause), ["connection_closed_unanswered"]);
  });

  it("labels a pod's process from its first write, and again after the container restarted", async () => {
    const labels = { namespace: "widgets", pod: "widget-operator-5c7d8f9b4-k2v9x", container: "manager" };
    const procs = async (id: string) => path.join(await containerCgroup(id), "cgroup.procs");
    const before = await run([client, SHORT_LIVED, String(port), "50", "300"], { preExec: `echo $$ > ${await procs(firstContainer)}` });
    // The container restarts: a new id, in the same pod cgroup, which the pod status names only later.
    const restarted = await run([client, SHORT_LIVED, String(port), "50", "300"], { preExec: `echo $$ > ${await procs(randomBytes(32).toString("hex"))}` });
    await waitFor("both processes' losses", () => [before.pid, restarted.pid].every((pid) => agent.events.some((e) => e.pid === pid)), 15_000).catch((err: unknown) => {
      throw new Error(`${String(err)}; pids ${before.pid} ${restarted.pid}; events ${JSON.stringify(agent.events.map((e) => [e.pid, e.cause, e.pod]))}; agent log:\n${agent.stderr.slice(-30).join("\n")}`);
    });
    for (const pid of [before.pid, restarted.pid]) {
      const events = agent.events.filter((e) => e.pid === pid);
      assert.equal(events.length, 1, JSON.stringify(events));
      assert.deepEqual([events[0]!.namespace, events[0]!.pod, events[0]!.container], [labels.namespace, labels.pod, labels.container]);
    }
    assert.equal(await agent.metric("lostwrite_status_write_lost_total", { ...labels, controller: "widget-operator" }), 2);
  });

  it("applies changes through the probe's control channel: the apiserver moves, the kernel filter follows", async () => {
    const moved = await faultyApiserver();
    cleanup.push(() => void moved.close());
    const movedPort = (moved.address() as net.AddressInfo).port;
    await control(api, "POST", "/objects", kubernetesSlice(["127.0.0.1"], movedPort));
    await waitFor("the endpoint change", () => agent.stderr.some((l) => l.includes("apiserver endpoints") && l.includes(`127.0.0.1:${movedPort}`)));
    const r = await run([path.join(dir, "lw-short"), SHORT_LIVED, String(movedPort), "50", "300"]);
    await waitFor("the loss on the moved apiserver", () => agent.events.some((e) => e.pid === r.pid && e.apiserver === `127.0.0.1:${movedPort}`));
    // Every change was acknowledged by the probe: none was assumed applied.
    assert.equal(await agent.metric("lostwrite_probe_control_failures_total"), 0);
    assert.equal((await fetch(`${agent.url}/readyz`)).status, 200);
  });

  it("applies a change made while bpftrace restarts, once the new one attaches", async () => {
    const agentPid = hostPidOfShapedAgent(agent.child.pid!)!;
    const bpftraceOf = (): number | undefined => bpftraceChildren(agentPid)[0];
    const bpftrace = bpftraceOf();
    assert.ok(bpftrace, "the agent's bpftrace");
    const moved = await faultyApiserver();
    cleanup.push(() => void moved.close());
    const movedPort = (moved.address() as net.AddressInfo).port;
    process.kill(bpftrace, "SIGKILL");
    // The change lands once the new bpftrace was started with the program
    // rendered before it, and while it still compiles (a second or more).
    await waitFor("the new bpftrace", () => (bpftraceOf() ?? bpftrace) !== bpftrace, 30_000);
    assert.equal(await agent.metric("lostwrite_probe_up"), 0, "the change must land before the new bpftrace attached");
    await control(api, "POST", "/objects", kubernetesSlice(["127.0.0.1"], movedPort));
    await waitFor("the endpoint change", () => agent.stderr.some((l) => l.includes("apiserver endpoints") && l.includes(`127.0.0.1:${movedPort}`)));
    await waitFor("bpftrace attached again", async () => (await agent.metric("lostwrite_probe_up")) === 1, 30_000);
    const r = await run([path.join(dir, "lw-short"), SHORT_LIVED, String(movedPort), "50", "300"]);
    await waitFor("the loss on the apiserver's new address", () => agent.events.some((e) => e.pid === r.pid && e.apiserver === `127.0.0.1:${movedPort}`));
    assert.equal(await agent.metric("lostwrite_probe_control_failures_total"), 0);
  });

  it("has doctor tell the truth about the shape", () => {
    const doctor = (procRoot: string) => {
      const argv = inDeployedShape([path.join(repoRoot, "node_modules/.bin/node"), path.join(repoRoot, "agent/bin/lostwrite.js"), "doctor"], shape);
      return spawnSync(argv[0]!, argv.slice(1), { encoding: "utf8", env: agentEnv({ LOSTWRITE_PROC_ROOT: procRoot }) });
    };
    const good = doctor(shape.procRoot);
    assert.equal(good.status, 0, good.stdout + good.stderr);
    assert.match(good.stdout, /ok {4}bpftrace attaches/);
    assert.match(good.stdout, new RegExp(`ok {4}host /proc: ${shape.procRoot} is the host's`));
    assert.match(good.stdout, /ok {4}agent pid: own PID namespace: pid 1 here is host pid \d+/);
    // The shape grants what bpftrace's compiler is paged out with.
    assert.match(good.stdout, /ok {4}compiler page-out: \S+lostwrite-pageout and CAP_SYS_NICE present/);
    // The pod's own /proc shows none of the other pods' processes.
    const wrong = doctor("/proc");
    assert.equal(wrong.status, 1, wrong.stdout);
    assert.match(wrong.stdout, /FAIL {2}host \/proc: \/proc is not the host's \/proc/);
  });
});
