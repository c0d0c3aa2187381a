// Kubernetes discovery end to end, without a cluster: the testbed apiserver
// (TLS, list+watch) serves this node's pods and the `kubernetes`
// EndpointSlice; a real process in a real cgroup, named the way containerd
// names a container's cgroup, stands in for the operator's container. The
// agent's discovery must find that process through /proc, label it from the
// pod, pick up a second process started later, follow an EndpointSlice
// change and drop the pod when it is deleted.
//
// Needs root and a writable cgroup v2 hierarchy. Without them it says why
// and skips; under CI=true it fails instead.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, rmdir, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startApiserver } from "../../../testbed/apiserver/apiserver.ts";
import { AgentMetrics } from "../../src/telemetry/metrics.ts";
import type { Logger } from "../../src/telemetry/log.ts";
import type { ApiserverEndpoint } from "../../src/sources/targets/kubernetes/apiserverEndpoints.ts";
import { KubernetesTargets, type KubeTarget } from "../../src/sources/targets/kubernetes/kubernetesTargets.ts";
import { NODE, cgroup2Mount, control, kubernetesSlice, podFor, whyCannotRun } from "./support/kubeFixtures.ts";


const reason = await whyCannotRun();
const skip = reason !== null && process.env.CI !== "true" ? reason : false;

function waitFor<T>(subscribe: (cb: (v: T) => void) => () => void, ok: (v: T) => boolean, ms: number, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`timed out after ${ms} ms waiting for ${what}`));
    }, ms);
    const off = subscribe((v) => {
      if (!ok(v)) return;
      clearTimeout(timer);
      off();
      resolve(v);
    });
  });
}

function startSleeper(): ChildProcess {
  const child = spawn("sleep", ["120"], { stdio: "ignore" });
  assert.ok(child.pid, "sleep started");
  return child;
}

void test("discovery finds a process in a pod's container cgroup, labels it, follows the process set, the EndpointSlice and the pod's deletion", { skip, timeout: 60_000 }, async (t) => {
  assert.equal(reason, null, `cannot run: ${reason}`);
  const mount = (await cgroup2Mount()) ?? "";
  const containerId = randomBytes(32).toString("hex");
  const podCgroup = join(mount, `lostwrite-e2e-${process.pid}.slice`);
  const containerCgroup = join(podCgroup, `cri-containerd-${containerId}.scope`);
  await mkdir(containerCgroup, { recursive: true });
  const children: ChildProcess[] = [];
  const dir = await mkdtemp(join(tmpdir(), "lostwrite-e2e-kube-"));
  const api = await startApiserver({ dir });
  const logLines: string[] = [];
  const push = (msg: string, fields?: unknown): void => void logLines.push(`${msg} ${JSON.stringify(fields ?? {})}`);
  const log: Logger = { info: push, warn: push, error: push, warnRateLimited: (_k, m, f) => push(m, f), warnOnce: (_k, m, f) => push(m, f) };
  const targets = new KubernetesTargets({
    nodeName: NODE,
    kubeconfig: api.kubeconfigPath,
    procRoot: "/proc",
    env: {},
    metrics: new AgentMetrics(),
    log,
  });
  t.after(async () => {
    await targets.stop();
    await api.close();
    for (const c of children) {
      if (c.exitCode === null && c.signalCode === null) {
        const exited = new Promise((resolve) => c.once("exit", resolve));
        c.kill("SIGKILL");
        await exited;
      }
    }
    await rmdir(containerCgroup).catch(() => undefined);
    await rmdir(podCgroup).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  });

  const first = startSleeper();
  children.push(first);
  await writeFile(join(containerCgroup, "cgroup.procs"), String(first.pid));
  await control(api, "POST", "/objects", podFor(containerId));
  await control(api, "POST", "/objects", kubernetesSlice(["127.0.0.2"]));

  await targets.start();
  const label = (ts: KubeTarget[]): string[] =>
    ts.map((x) => `${x.pid} ${x.identity.process} ${x.identity.namespace}/${x.identity.pod}/${x.identity.container} ${x.identity.controller}`);
  assert.deepEqual(label(targets.targets()), [`${first.pid} sleep widgets/widget-operator-5c7d8f9b4-k2v9x/manager widget-operator`], logLines.join("\n"));

  const key = (es: ApiserverEndpoint[]): string[] => es.map((e) => `${e.host}:${e.port}`);
  assert.deepEqual(key(targets.apiservers()), [`127.0.0.1:${api.port}`, "127.0.0.2:6443"].sort());

  // A second process in the same container, started after discovery.
  const second = startSleeper();
  children.push(second);
  const both = waitFor<KubeTarget[]>((cb) => targets.onTargets(cb), (v) => v.length === 2, 3000, "the later process");
  await writeFile(join(containerCgroup, "cgroup.procs"), String(second.pid));
  assert.deepEqual((await both).map((x) => x.pid).sort((a, b) => a - b), [first.pid, second.pid].sort((a, b) => (a ?? 0) - (b ?? 0)));

  // The apiserver moves: the endpoint set follows.
  const moved = waitFor<ApiserverEndpoint[]>((cb) => targets.onApiservers(cb), () => true, 5000, "the EndpointSlice change");
  await control(api, "POST", "/objects", kubernetesSlice(["127.0.0.3", "127.0.0.4"]));
  assert.deepEqual(key(await moved), [`127.0.0.1:${api.port}`, "127.0.0.3:6443", "127.0.0.4:6443"].sort());

  // The pod goes away: its processes are no longer targets.
  const dropped = waitFor<KubeTarget[]>((cb) => targets.onTargets(cb), (v) => v.length === 0, 5000, "the deleted pod to be dropped");
  await control(api, "DELETE", `/objects?apiVersion=v1&kind=Pod&namespace=widgets&name=widget-operator-5c7d8f9b4-k2v9x`);
  assert.deepEqual(await dropped, []);
});
