// deploy/ and the agent's Kubernetes mode against the real kube-apiserver
// (testbed/controlplane: etcd and kube-apiserver v1.37 built from source),
// where the unit tests hold the manifests to schemas and the other Kubernetes
// e2e tests run the agent against the project's stand-in apiserver:
//
//  - every rendering of deploy/ (kustomize base, base + each component, each
//    overlay, the Helm chart with each component's values) is accepted by a
//    server-side dry-run: the apiserver's own validation and admission, Pod
//    Security from the namespace's labels judging the DaemonSet's pod, and the
//    Prometheus Operator's kinds checked by that operator's own CRDs (from its
//    Go module, through the module proxy);
//  - the base's RBAC, applied for real, grants the ServiceAccount exactly what
//    the agent's code asks for (`kubectl auth can-i --list`);
//  - the agent with --kubernetes, authenticated as that ServiceAccount by a
//    token the apiserver issued, lists and watches this node's pods (bound
//    with spec.nodeName; no kubelet runs, so the test writes their status),
//    labels a loss with the pod it came from, and follows the `kubernetes`
//    EndpointSlice, which the test writes (the apiserver runs with
//    --endpoint-reconciler-type=none).
//
// The control plane's binaries come from the tools cache (`npm run tools`
// builds them before the e2e files), as does helm.
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { execa } from "execa";
import { stringify } from "yaml";
import { buildControlPlane } from "../../../testbed/controlplane/build.ts";
import { startControlPlane, type ControlPlane } from "../../../testbed/controlplane/controlPlane.ts";
import { goEnv, goUnavailable, run } from "../../../testbed/goBuild.ts";
import { helmBinary } from "../../../testbed/helm/helm.ts";
import { startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { COMPONENT_VALUES, helmRenderings, kustomizeRenderings, type K8sObject, type Rendering } from "../deployManifests.ts";
import { repoPath } from "../repoPath.ts";
import { faultyApiserver, portOf } from "./support/faultyApiserver.ts";
import { assertKernelRequirements, missingKernelRequirements } from "./support/kernelRequirements.ts";
import { makeContainerCgroup, whyCannotRun } from "./support/kubeFixtures.ts";
import { locateTool, skipUnlessCI } from "./support/tools.ts";

const kubectlTool = locateTool("kubectl", "install kubectl");
const goProblem = goUnavailable();
const skip = skipUnlessCI(kubectlTool, { path: goProblem === null ? "go" : null, reason: goProblem ?? "" });
const agentReasons = [...missingKernelRequirements(), (await whyCannotRun()) ?? ""].filter(Boolean);
const agentSkip = agentReasons.length > 0 && process.env.CI !== "true" ? agentReasons.join("; ") : false;

const CLIENT = path.join(path.dirname(fileURLToPath(import.meta.url)), "clients/lw_client.py");
/** The Prometheus Operator release whose CRDs (example/prometheus-operator-crd in its module) check ServiceMonitor and PrometheusRule. */
const PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.85.0";
const MONITORING_CRDS = ["servicemonitors", "prometheusrules"];
const NAMESPACE = "lostwrite";
const SERVICE_ACCOUNT = `system:serviceaccount:${NAMESPACE}:lostwrite`;
const NODE = "node-real-e2e";

/**
 * What the agent's code asks the apiserver for, nothing more
 * (agent/src/sources/targets/kubernetes/kubernetesTargets.ts: two
 * ValidatedListWatch, each a list, then watches from its resourceVersion, and
 * a list again after 410 Gone; never a get, never a write):
 *  - listPodForAllNamespaces with fieldSelector=spec.nodeName=<node>, and the
 *    watch of /api/v1/pods with the same selector: every namespace;
 *  - listNamespacedEndpointSlice in `default` with
 *    labelSelector=kubernetes.io/service-name=kubernetes, and its watch.
 */
const AGENT_NEEDS = {
  everyNamespace: ["pods list", "pods watch"],
  default: ["endpointslices.discovery.k8s.io list", "endpointslices.discovery.k8s.io watch"],
};
/**
 * Granted beyond that, each on purpose. The EndpointSlices are granted in
 * every namespace, not by a Role in `default`: the base's `namespace:
 * lostwrite` (and a user's overlay's `namespace:`) would move such a Role, and
 * its binding, out of `default`, where the agent would then be refused.
 */
const GRANTED_BEYOND_NEED_OUTSIDE_DEFAULT = ["endpointslices.discovery.k8s.io list", "endpointslices.discovery.k8s.io watch"];

describe("deploy/ and the agent's Kubernetes mode on the real kube-apiserver", { skip, timeout: 9 * 60_000 }, () => {
  let cp: ControlPlane;
  let dir: string;
  let renderings: Rendering[];
  const cleanup: (() => Promise<unknown> | void)[] = [];
  const log = (line: string): void => console.log(`# ${line}`);

  /** kubectl as the admin of this control plane, with a discovery cache of this run's. */
  const kubectl = (args: string[], input?: string, reject = true) =>
    execa(kubectlTool.path ?? assert.fail(kubectlTool.reason), ["--kubeconfig", cp.adminKubeconfigPath, "--cache-dir", path.join(dir, "kube-cache"), ...args], {
      ...(input === undefined ? {} : { input }),
      reject,
    });

  before(async () => {
    if (goProblem !== null) throw new Error(`e2e test cannot run: ${goProblem}`);
    dir = await mkdtemp(path.join(os.tmpdir(), "lostwrite-realdeploy-"));
    const binaries = await buildControlPlane(log);
    cp = await startControlPlane({ binaries, log });
    if (kubectlTool.path === null) assert.fail(kubectlTool.reason);
    renderings = [...(await kustomizeRenderings()), ...(await helmRenderings(await helmBinary(log)))];
    // The namespace exists before the dry-runs (a dry-run creates nothing, and
    // a namespaced object's dry-run needs its namespace), with the base's labels.
    const base = renderings.find((r) => r.name === "kustomize deploy/base")!;
    await kubectl(["apply", "-f", "-"], stringify(base.objects.find((o) => o.kind === "Namespace")));
  });

  after(async () => {
    for (const step of cleanup.reverse()) await Promise.resolve(step()).catch((error: unknown) => console.error(String(error)));
    await cp?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** The base's ServiceAccount, ClusterRole and binding, applied for real (again is fine). */
  async function applyBaseRbac(): Promise<void> {
    const base = renderings.find((r) => r.name === "kustomize deploy/base")!;
    const rbac = base.objects.filter((o) => ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"].includes(o.kind));
    assert.equal(rbac.length, 3);
    await kubectl(["apply", "-f", "-"], rbac.map((o) => stringify(o)).join("---\n"));
  }

  it("accepts every rendering of deploy/ in a server-side dry-run, and Pod Security admits the DaemonSet's pod", async () => {
    // Why the real apiserver: its validation, defaulting and admission (Pod Security, priority) are what a cluster runs, not a schema copy.
    // The Prometheus Operator's CRDs, as that release ships them, from its Go
    // module. Where the module proxy cannot serve it (offline, no module
    // cache), the objects of those kinds are left out and named; under CI=true
    // that fails instead.
    const crdDir = await prometheusOperatorCrds(path.join(dir, "go-download"));
    if (typeof crdDir === "string") {
      for (const crd of MONITORING_CRDS) await kubectl(["apply", "--server-side", "-f", path.join(crdDir, `monitoring.coreos.com_${crd}.yaml`)]);
      await kubectl(["wait", "--for=condition=Established", "--timeout=60s", ...MONITORING_CRDS.map((c) => `crd/${c}.monitoring.coreos.com`)]);
    } else {
      assert.notEqual(process.env.CI, "true", `the Prometheus Operator's CRDs: ${crdDir.unavailable}`);
    }
    const monitoring = (o: K8sObject): boolean => o.apiVersion.startsWith("monitoring.coreos.com/");

    const refused: string[] = [];
    const warnings: string[] = [];
    const leftOut: string[] = [];
    for (const r of renderings) {
      let { yaml, objects } = r;
      if (typeof crdDir !== "string" && objects.some(monitoring)) {
        leftOut.push(...objects.filter(monitoring).map((o) => `${r.name}: ${o.kind}/${o.metadata.name}`));
        objects = objects.filter((o) => !monitoring(o));
        yaml = objects.map((o) => stringify(o)).join("---\n");
      }
      const res = await kubectl(["apply", "--dry-run=server", "-f", "-"], yaml, false);
      if (res.exitCode !== 0) refused.push(`${r.name}: ${res.stderr}`);
      warnings.push(...res.stderr.split("\n").filter((l) => l.startsWith("Warning:")).map((l) => `${r.name}: ${l}`));
      const applied = res.stdout.split("\n").filter(Boolean);
      assert.equal(applied.length, objects.length, `${r.name}: one line per object:\n${res.stdout}`);
      // The DaemonSet's pod as its controller would create it: Pod Security and the Priority admission judge pods, not DaemonSets.
      const pod = podOf(daemonSetOf(r.objects), NAMESPACE);
      const admitted = await kubectl(["create", "--dry-run=server", "-o", "name", "-f", "-"], JSON.stringify(pod), false);
      if (admitted.exitCode !== 0) refused.push(`${r.name}, the DaemonSet's pod: ${admitted.stderr}`);
      warnings.push(...admitted.stderr.split("\n").filter((l) => l.startsWith("Warning:")).map((l) => `${r.name}, the DaemonSet's pod: ${l}`));
    }
    log(`${renderings.length} renderings dry-run on the real apiserver: ${renderings.map((r) => r.name).join("; ")}`);
    if (leftOut.length > 0) log(`left out, no CRD for their kind (${typeof crdDir === "string" ? "" : crdDir.unavailable}): ${leftOut.join("; ")}`);
    assert.deepEqual(refused, [], "every rendering accepted");
    assert.deepEqual(warnings, [], "no warning from the apiserver (deprecations, Pod Security warn)");

    // The chart as a user installs it: helm itself asks the apiserver (a
    // server-side dry run of the release, every value on that needs no CRD
    // this apiserver may lack).
    const helmValues = Object.values(COMPONENT_VALUES).flat().filter((v) => typeof crdDir === "string" || (!v.startsWith("serviceMonitor") && !v.startsWith("prometheusRule")));
    const install = await execa(await helmBinary(log), [
      "install", "lostwrite", repoPath("deploy/helm/lostwrite"), "--namespace", NAMESPACE, "--dry-run=server",
      "--kubeconfig", cp.adminKubeconfigPath, ...helmValues.flatMap((v) => ["--set", v]),
    ], { reject: false, all: true });
    assert.equal(install.exitCode, 0, `helm install --dry-run=server:\n${install.all}`);
    assert.match(install.all, /STATUS: pending-install/, install.all);

    // Accepted means checked: with the CRDs' schemas and strict field validation (kubectl's default), a misspelt field is refused.
    if (typeof crdDir === "string") {
      const overlay = renderings.find((r) => r.name === "kustomize deploy/overlays/kube-prometheus-stack")!;
      const monitor = structuredClone(overlay.objects.find((o) => o.kind === "ServiceMonitor")) as K8sObject & { spec: { endpoints: Record<string, unknown>[] } };
      monitor.spec.endpoints[0]!.honourLabels = true;
      const misspelt = await kubectl(["apply", "--dry-run=server", "-f", "-"], stringify(monitor), false);
      assert.notEqual(misspelt.exitCode, 0, "a ServiceMonitor with a field its CRD lacks is refused");
      assert.match(misspelt.stderr, /unknown field "spec\.endpoints\[0\]\.honourLabels"/);
    }

    // The namespace's labels are what admits that pod: where they say baseline, the same pod is refused.
    await kubectl(["create", "namespace", "lostwrite-baseline"]);
    await kubectl(["label", "namespace", "lostwrite-baseline", "pod-security.kubernetes.io/enforce=baseline"]);
    const base = renderings.find((r) => r.name === "kustomize deploy/base")!;
    const refusedPod = await kubectl(["create", "--dry-run=server", "-f", "-"], JSON.stringify(podOf(daemonSetOf(base.objects), "lostwrite-baseline")), false);
    assert.notEqual(refusedPod.exitCode, 0, "baseline refuses the agent's pod");
    assert.match(refusedPod.stderr, /violates PodSecurity "baseline:latest"/);
    assert.match(refusedPod.stderr, /hostPath volumes/);
    assert.match(refusedPod.stderr, /non-default capabilities/);
  });

  it("grants the agent's ServiceAccount exactly what its code asks for", async () => {
    // Why the real apiserver: `kubectl auth can-i --list` asks its RBAC authorizer, with the bootstrap roles every account has.
    await applyBaseRbac();
    for (const namespace of ["default", NAMESPACE, "widgets"]) {
      // Every authenticated account can do some things (the bootstrap roles: discovery, self reviews): the same for an account bound to nothing.
      const everyone = await canIList(`system:serviceaccount:${NAMESPACE}:bound-to-nothing`, namespace);
      const agent = await canIList(SERVICE_ACCOUNT, namespace);
      const granted = [...agent].filter((g) => !everyone.has(g)).sort();
      const needed = [...AGENT_NEEDS.everyNamespace, ...(namespace === "default" ? AGENT_NEEDS.default : [])];
      const accepted = namespace === "default" ? [] : GRANTED_BEYOND_NEED_OUTSIDE_DEFAULT;
      assert.deepEqual(granted.filter((g) => !needed.includes(g)).sort(), [...accepted].sort(), `nothing more in namespace ${namespace}`);
      assert.deepEqual(needed.filter((n) => !granted.includes(n)), [], `nothing missing in namespace ${namespace}`);
    }
  });

  /** `kubectl auth can-i --list` as `user` in `namespace`: one "resource verb" per grant ("pods list"; "/api/* get" for a URL). */
  async function canIList(user: string, namespace: string): Promise<Set<string>> {
    const { stdout } = await kubectl(["auth", "can-i", "--list", `--as=${user}`, "-n", namespace]);
    const out = new Set<string>();
    for (const line of stdout.split("\n").slice(1)) {
      const m = /^(\S*)\s+\[([^\]]*)\]\s+\[([^\]]*)\]\s+\[([^\]]*)\]\s*$/.exec(line);
      if (!m) continue;
      const [, resource, urls, names, verbs] = m as unknown as [string, string, string, string, string];
      const what = `${resource || urls}${names ? `(${names})` : ""}`;
      for (const verb of verbs.split(" ").filter(Boolean)) out.add(`${what} ${verb}`);
    }
    assert.ok(out.size > 0, `can-i --list printed no rule:\n${stdout}`);
    return out;
  }

  it("runs the agent as its ServiceAccount: lists and watches this node's pods, labels a loss with one, follows the kubernetes EndpointSlice", { skip: agentSkip }, async () => {
    // Why the real apiserver: its token authentication and RBAC, field selectors, watch semantics and status subresource decide what the agent sees.
    assertKernelRequirements();
    assert.equal(await whyCannotRun(), null);
    await applyBaseRbac();
    const token = (await kubectl(["create", "token", "lostwrite", "-n", NAMESPACE, "--duration=1h"])).stdout.trim();
    const kubeconfigPath = path.join(dir, "agent.kubeconfig");
    await writeFile(kubeconfigPath, stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "real", cluster: { server: cp.url, "certificate-authority-data": Buffer.from(cp.caPem).toString("base64") } }],
      users: [{ name: "lostwrite", user: { token } }],
      contexts: [{ name: "lostwrite", context: { cluster: "real", user: "lostwrite" } }],
      "current-context": "lostwrite",
    }), { mode: 0o600 });

    await cp.ensureNamespace("widgets");
    const faulty = await faultyApiserver();
    cleanup.push(() => void faulty.close());
    const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
    const manager = path.join(dir, "manager");
    await symlink(python, manager);
    /** A process in a new container cgroup, as containerd names one: the python client, waiting for "go" on stdin. */
    const startContainer = async (name: string): Promise<{ containerId: string; child: ChildProcess }> => {
      const { containerId, path: cgroup } = await makeContainerCgroup(`real-${name}`, cleanup);
      const child = spawn(manager, [CLIENT, "plain_reset", "127.0.0.1", String(portOf(faulty))], { stdio: ["pipe", "ignore", "inherit"] });
      await writeFile(path.join(cgroup, "cgroup.procs"), String(child.pid));
      cleanup.push(async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.kill("SIGKILL");
        await exited; // then its cgroup is empty and can go
      });
      return { containerId, child };
    };
    const first = await startContainer("first");
    const later = await startContainer("later");
    const elsewhere = await startContainer("elsewhere");

    // Listed: bound here and running before the agent starts.
    await createRunningPod(cp, "widget-operator-5c7d8f9b4-k2v9x", NODE, first.containerId, "10.244.0.7");
    // Never seen: bound to another node (the agent's field selector).
    await createRunningPod(cp, "widget-operator-5c7d8f9b4-other", "another-node", elsewhere.containerId, "10.244.1.7");

    const agent: AgentProcess = await startAgentProcess(
      ["--kubernetes", "--kubeconfig", kubeconfigPath, "--node-name", NODE, "--apiserver", `127.0.0.1:${portOf(faulty)}`, "--correlation-window", "500ms"],
      // Not in a pod: no Service address from the environment.
      { KUBERNETES_SERVICE_HOST: "", KUBERNETES_SERVICE_PORT: "" },
    );
    cleanup.push(() => agent.stop());
    const added = (pid: number | undefined): boolean => targetChanges(agent).some((c) => c.added.includes(`manager[${pid}]`));
    await waitFor("the listed pod's process to be watched", () => added(first.child.pid), 15_000);
    assert.equal(await agent.metric("lostwrite_targets", { source: "kubernetes" }), 1);

    // Watched: a pod bound here after the agent started, running once its status says so.
    await createRunningPod(cp, "widget-operator-5c7d8f9b4-later", NODE, later.containerId, "10.244.0.8");
    await waitFor("the watched pod's process to be watched", () => added(later.child.pid), 15_000);
    assert.equal(await agent.metric("lostwrite_targets", { source: "kubernetes" }), 2);
    assert.ok(!added(elsewhere.child.pid), "a pod of another node is never watched");

    // The pod's metadata, as the real apiserver stored it, labels the loss.
    const labels = { namespace: "widgets", pod: "widget-operator-5c7d8f9b4-k2v9x", container: "manager", process: "manager" };
    first.child.stdin!.end("go\n");
    await waitFor("the listed pod's loss, labelled with its pod and owner", async () =>
      (await agent.metric("lostwrite_status_write_lost_total", { ...labels, controller: "widget-operator", cause: "write_failed" })) === 1, 15_000);

    // A deleted pod takes its process with it.
    const deleted = await cp.request("DELETE", "/api/v1/namespaces/widgets/pods/widget-operator-5c7d8f9b4-later?gracePeriodSeconds=0");
    assert.equal(deleted.status, 200, JSON.stringify(deleted.body));
    await waitFor("the deleted pod's process to leave the targets", () =>
      targetChanges(agent).some((c) => c.removed.includes(`manager[${later.child.pid}]`)), 15_000);

    // The `kubernetes` EndpointSlice: created, moved, deleted; the agent's endpoint set follows each time.
    /** An "apiserver endpoints" line logged after line `since` of the agent's stderr, with every endpoint of `want` and none of `not`. */
    const endpointsLine = (since: number, want: string[], not: string[]): boolean => agent.stderr.slice(since).some((l) =>
      l.includes('"apiserver endpoints"') && want.every((e) => l.includes(`"${e}"`)) && not.every((e) => !l.includes(`"${e}"`)));
    const always = [`127.0.0.1:${cp.port}`, `127.0.0.1:${portOf(faulty)}`];
    const slices = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";
    const loopback = await cp.request("POST", slices, { body: kubernetesSlice(["127.0.0.1"], 6443) });
    assert.equal(loopback.status, 422, `the real apiserver refuses a loopback endpoint: ${JSON.stringify(loopback.body)}`);
    let since = agent.stderr.length;
    const created = await cp.request("POST", slices, { body: kubernetesSlice(["192.0.2.10"], 6443) });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    await waitFor("the created EndpointSlice's endpoint", () => endpointsLine(since, [...always, "192.0.2.10:6443"], []), 15_000);
    since = agent.stderr.length;
    const moved = await cp.request("PATCH", `${slices}/kubernetes`, {
      body: { endpoints: [{ addresses: ["192.0.2.11"], conditions: { ready: true } }], ports: [{ name: "https", port: 7443, protocol: "TCP" }] },
      contentType: "application/merge-patch+json",
    });
    assert.equal(moved.status, 200, JSON.stringify(moved.body));
    await waitFor("the moved endpoint, the old one gone", () => endpointsLine(since, [...always, "192.0.2.11:7443"], ["192.0.2.10:6443"]), 15_000);
    since = agent.stderr.length;
    const gone = await cp.request("DELETE", `${slices}/kubernetes`);
    assert.equal(gone.status, 200, JSON.stringify(gone.body));
    await waitFor("the deleted EndpointSlice's endpoint gone", () => endpointsLine(since, always, ["192.0.2.11:7443"]), 15_000);

    // Nothing the ServiceAccount was refused, nothing malformed.
    const problems = agent.stderr.filter((l) => /failed; retrying|skipped a malformed|forbidden/i.test(l));
    assert.deepEqual(problems, [], "the agent's lists and watches all succeeded");
  });
});

/** The directory of the Prometheus Operator's CRDs in its module, downloaded through the module proxy (or from the module cache); why not, when it cannot be. */
async function prometheusOperatorCrds(workDir: string): Promise<string | { unavailable: string }> {
  await mkdir(workDir, { recursive: true });
  let output: string;
  try {
    output = await run("go", ["mod", "download", "-json", PROMETHEUS_OPERATOR], { cwd: workDir, env: { ...goEnv(), GOFLAGS: "" } });
  } catch (error) {
    return { unavailable: (error as Error).message.replace(/\s+/g, " ").trim().slice(0, 400) };
  }
  const info = JSON.parse(output) as { Dir?: string; Error?: string };
  if (!info.Dir) return { unavailable: `go mod download ${PROMETHEUS_OPERATOR}: ${info.Error ?? "no directory"}` };
  return path.join(info.Dir, "example/prometheus-operator-crd");
}

/** The agent's "targets changed" log lines: the processes added and removed, as comm[pid]. */
function targetChanges(agent: AgentProcess): { added: string[]; removed: string[] }[] {
  return agent.stderr.flatMap((line) => {
    try {
      const parsed = JSON.parse(line) as { msg?: string; added?: string[]; removed?: string[] };
      return parsed.msg === "targets changed" ? [{ added: parsed.added ?? [], removed: parsed.removed ?? [] }] : [];
    } catch {
      return [];
    }
  });
}

function daemonSetOf(objects: K8sObject[]): K8sObject & { spec: { template: { metadata: { labels: Record<string, string> }; spec: Record<string, unknown> } } } {
  const found = objects.filter((o) => o.kind === "DaemonSet");
  assert.equal(found.length, 1, "one DaemonSet");
  return found[0] as never;
}

/** The pod the DaemonSet controller would create from the template, in `namespace`. */
function podOf(ds: ReturnType<typeof daemonSetOf>, namespace: string): K8sObject {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: "lostwrite-template", namespace, labels: ds.spec.template.metadata.labels },
    spec: { ...ds.spec.template.spec, nodeName: NODE },
  };
}

/** A pod of a Deployment's ReplicaSet bound to `node`, then its status as a kubelet would write it: running, its container's id. */
async function createRunningPod(cp: ControlPlane, name: string, node: string, containerId: string, podIP: string): Promise<void> {
  const res = await cp.request("POST", "/api/v1/namespaces/widgets/pods", {
    body: {
      apiVersion: "v1",
      kind: "Pod",
      metadata: {
        name,
        namespace: "widgets",
        labels: { "lostwrite.dev/watch": "true", "pod-template-hash": "5c7d8f9b4" },
        ownerReferences: [{ apiVersion: "apps/v1", kind: "ReplicaSet", name: "widget-operator-5c7d8f9b4", uid: "7d0c2f4e-1a5b-4c3d-9e8f-0a1b2c3d4e5f", controller: true }],
      },
      spec: { nodeName: node, containers: [{ name: "manager", image: "registry.example/widget-operator:1.0" }] },
    },
  });
  assert.equal(res.status, 201, `create pod ${name}: ${JSON.stringify(res.body)}`);
  const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  const status = await cp.request("PATCH", `/api/v1/namespaces/widgets/pods/${name}/status`, {
    contentType: "application/merge-patch+json",
    body: {
      status: {
        phase: "Running",
        hostIP: "192.0.2.1",
        hostIPs: [{ ip: "192.0.2.1" }],
        podIP,
        podIPs: [{ ip: podIP }],
        startTime: now,
        containerStatuses: [{
          name: "manager",
          containerID: `containerd://${containerId}`,
          image: "registry.example/widget-operator:1.0",
          imageID: "registry.example/widget-operator@sha256:" + "0".repeat(64),
          ready: true,
          started: true,
          restartCount: 0,
          state: { running: { startedAt: now } },
        }],
      },
    },
  });
  assert.equal(status.status, 200, `status of pod ${name}: ${JSON.stringify(status.body)}`);
}

function kubernetesSlice(addresses: string[], port: number): Record<string, unknown> {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: { name: "kubernetes", namespace: "default", labels: { "kubernetes.io/service-name": "kubernetes", "endpointslice.kubernetes.io/managed-by": "lostwrite-e2e" } },
    addressType: "IPv4",
    endpoints: addresses.map((a) => ({ addresses: [a], conditions: { ready: true } })),
    ports: [{ name: "https", port, protocol: "TCP" }],
  };
}
