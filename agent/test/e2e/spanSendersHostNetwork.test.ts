// Who may send spans, end to end, between two pods on the host network: the
// agent with --kubernetes and real probes; `lwvictim`, the operator of a
// host-network pod, and `lwforger`, the operator of another host-network pod,
// each in its own pod's cgroup and both in the agent's own network namespace.
// Both send from the node's address (10.213.2.1), so
// the address tells nothing: only the process holding each connection does.
//
// The victim's status write is reset by the stand-in apiserver, and its own
// reconcile span says nothing of errors: a silent loss. The forger sends, in
// the victim's name (its process.pid, its pod's name, namespace and uid,
// together and each alone), an ERROR reconcile span that would make the loss
// look noticed, and a status PATCH answered 409 for widgets/w99 that would
// become a loss the victim never had: over OTLP/HTTP from its own process,
// and over OTLP/gRPC (the SDK's exporter) from a second process of its pod.
// Every forged request is refused and counted; the victim's loss is joined
// with its own span and stays silent; no loss is invented; the victim's own
// 409 still is one.
//
// The file re-runs itself under `unshare --net`, so the node's address and
// every socket live in a namespace of its own.
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { SpanStatusCode } from "@opentelemetry/api";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import { jsonBody, openReconcile, refusedStatusPatch, type SpanDef } from "../unit/sources/spans/otlpSpans.ts";
import { faultyApiserver, portOf } from "./support/faultyApiserver.ts";
import { startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { assertKernelRequirements, missingKernelRequirements } from "./support/kernelRequirements.ts";
import { NODE, control, makeContainerCgroup, kubernetesSlice, podFor, whyCannotRun } from "./support/kubeFixtures.ts";
import { runInOwnNetworkNamespace, whyNoOwnNetworkNamespace } from "./support/ownNetworkNamespace.ts";

const HERE = fileURLToPath(import.meta.url);
const CLIENTS = path.join(path.dirname(HERE), "clients");
const SENDER = path.join(CLIENTS, "lw_span_sender.py");
const GRPC_EXPORT = path.join(CLIENTS, "otlpGrpcExport.ts");
const NODE_BIN = path.join(path.dirname(HERE), "../../../node_modules/.bin/node");
const MARKER = "SPAN_SENDERS_HOST_NETWORK_E2E_IN_OWN_NETNS";
const IN_NETNS = process.env[MARKER] === "1";
const NODE_ADDRESS = "10.213.2.1";
const OTLP_PORT = 4318;
const OTLP_GRPC_PORT = 4317;

const reasons = [...missingKernelRequirements(), (await whyCannotRun()) ?? "", whyNoOwnNetworkNamespace() ?? ""].filter(Boolean);
const skip = reasons.length && process.env.CI !== "true" ? reasons.join("; ") : false;

interface PodObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace: string; uid: string; ownerReferences: Record<string, unknown>[] };
  spec: Record<string, unknown>;
  status: Record<string, unknown>;
}

/** A watched pod of `deployment` on the host network, its container `containerId`: the node's address is its own. */
function hostNetworkPod(containerId: string, deployment: string, suffix: string): PodObject {
  const pod = podFor(containerId) as unknown as PodObject;
  const hash = "5c7d8f9b4";
  return {
    ...pod,
    metadata: { ...pod.metadata, name: `${deployment}-${hash}-${suffix}`, ownerReferences: [{ ...pod.metadata.ownerReferences[0], name: `${deployment}-${hash}` }] },
    spec: { ...pod.spec, hostNetwork: true },
    status: { ...pod.status, podIP: NODE_ADDRESS, podIPs: [{ ip: NODE_ADDRESS }], hostIP: NODE_ADDRESS, hostIPs: [{ ip: NODE_ADDRESS }] },
  };
}

/** A child process answering one JSON line per line it is sent. */
class LineClient {
  readonly child: ChildProcess;
  readonly #lines: Record<string, unknown>[] = [];

  constructor(command: string, args: string[]) {
    this.child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
    createInterface({ input: this.child.stdout! }).on("line", (line) => this.#lines.push(JSON.parse(line) as Record<string, unknown>));
  }

  get pid(): number {
    return this.child.pid!;
  }

  async send(line: string, what: string): Promise<Record<string, unknown>> {
    const before = this.#lines.length;
    this.child.stdin!.write(`${line}\n`);
    await waitFor(`${what} of ${this.pid}`, () => this.#lines.length > before, 30_000);
    return this.#lines[before]!;
  }
}

if (!IN_NETNS) {
  describe("span senders on the host network (in a network namespace of its own)", { skip, timeout: 240_000 }, () => {
    it("runs the scenario under unshare --net", () => {
      assertKernelRequirements();
      runInOwnNetworkNamespace(HERE, MARKER, { timeoutMs: 220_000, tests: 1 });
    });
  });
} else {
  describe("span senders on the host network", { timeout: 200_000 }, () => {
    const cleanup: (() => Promise<unknown> | void)[] = [];
    let agent: AgentProcess | undefined;
    after(async () => {
      for (const step of cleanup.reverse()) await Promise.resolve(step()).catch(() => undefined);
    });

    it("refuses every span another host-network pod sends in the victim's name, over HTTP and gRPC; the victim's own span, matched by its connection, decides noticed", async () => {
      assert.equal(await whyCannotRun(), null);
      // The node's address, which both pods share with the agent (on lo: the
      // kernel may have no dummy-interface module, and a local address is local on any device).
      execFileSync("ip", ["link", "set", "lo", "up"]);
      execFileSync("ip", ["addr", "add", `${NODE_ADDRESS}/32`, "dev", "lo"]);

      const dir = await mkdtemp(path.join(os.tmpdir(), "lostwrite-hostnet-senders-"));
      cleanup.push(() => rm(dir, { recursive: true, force: true }));
      const victimCgroup = await makeContainerCgroup("hostnet-victim", cleanup);
      const forgerCgroup = await makeContainerCgroup("hostnet-forger", cleanup);
      const api: Apiserver = await startApiserver({ dir: path.join(dir, "apiserver") });
      cleanup.push(() => api.close());
      const faulty = await faultyApiserver(NODE_ADDRESS);
      cleanup.push(() => void faulty.close());
      // As stored: the apiserver gives each pod its uid.
      const victimPod = (await control(api, "POST", "/objects", hostNetworkPod(victimCgroup.containerId, "widget-operator", "k2v9x"))) as PodObject;
      const forgerPod = (await control(api, "POST", "/objects", hostNetworkPod(forgerCgroup.containerId, "gadget-operator", "q7w3e"))) as PodObject;
      await control(api, "POST", "/objects", kubernetesSlice([NODE_ADDRESS], portOf(faulty)));

      // Every process is in its pod's cgroup before the agent starts, so its
      // first scan makes each a target: the gRPC exporter too, which waits
      // on stdin until then, so that its connection is a target's when looked up.
      const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
      const start = async (client: LineClient, cgroup: string): Promise<LineClient> => {
        cleanup.push(() => void client.child.kill("SIGKILL"));
        await writeFile(path.join(cgroup, "cgroup.procs"), String(client.pid));
        return client;
      };
      for (const comm of ["lwvictim", "lwforger"]) await symlink(python, path.join(dir, comm));
      const victim = await start(new LineClient(path.join(dir, "lwvictim"), [SENDER, NODE_ADDRESS, String(OTLP_PORT)]), victimCgroup.path);
      const forger = await start(new LineClient(path.join(dir, "lwforger"), [SENDER, NODE_ADDRESS, String(OTLP_PORT)]), forgerCgroup.path);
      const grpcForger = await start(new LineClient(NODE_BIN, [GRPC_EXPORT, `http://${NODE_ADDRESS}:${OTLP_GRPC_PORT}`]), forgerCgroup.path);

      agent = await startAgentProcess(
        [
          "--kubernetes", "--kubeconfig", api.kubeconfigPath, "--node-name", NODE,
          "--otlp-listen", `0.0.0.0:${OTLP_PORT}`,
          "--otlp-grpc-listen", `0.0.0.0:${OTLP_GRPC_PORT}`,
          "--correlation-window", "3s",
        ],
        { KUBERNETES_SERVICE_HOST: "", KUBERNETES_SERVICE_PORT: "" },
      );
      cleanup.push(() => agent?.stop());
      const running = agent;
      // By pid: Node names its main thread (the comm the agent reports) "MainThread".
      const followed = (pid: number): boolean => running.stderr.some((l) => l.includes("targets changed") && l.includes(`[${pid}]"`));
      await waitFor("the agent to follow both pods' processes", () => followed(victim.pid) && followed(forger.pid) && followed(grpcForger.pid), 20_000).catch((err: unknown) => {
        throw new Error(`${(err as Error).message} (victim ${victim.pid}, forger ${forger.pid}, gRPC forger ${grpcForger.pid}); the agent said: ${running.stderr.join("\n")}`);
      });
      assert.equal((await victim.send(JSON.stringify({ cmd: "connect_api", host: NODE_ADDRESS, port: portOf(faulty) }), "connect_api")).step, "connect_api");

      // Reconcile spans open around the write about to fail.
      const now = Date.now();
      const reconcile = (traceId: string, resource: SpanDef["resource"], over: Partial<SpanDef> = {}): SpanDef =>
        openReconcile(traceId, now, { resource, ...over });
      /** A reconcile of `name` whose status PATCH was answered 409: a loss seen only in spans. */
      const conflict = (traceId: string, name: string, resource: SpanDef["resource"]): SpanDef[] => {
        const parent = reconcile(traceId, resource, { endMs: now + 200, attributes: { controller: "widget", controllerKind: "Widget", namespace: "widgets", name } });
        return refusedStatusPatch(parent, `/apis/example.com/v1/namespaces/widgets/widgets/${name}/status`, 409, now);
      };
      const { name: victimName, namespace, uid: victimUid } = victimPod.metadata;
      const victimClaims = {
        all: { "process.pid": victim.pid, "k8s.pod.name": victimName, "k8s.namespace.name": namespace, "k8s.pod.uid": victimUid, "service.name": "widget-operator" },
        pod: { "k8s.pod.name": victimName, "k8s.namespace.name": namespace, "k8s.pod.uid": victimUid },
        pid: { "process.pid": victim.pid },
        uid: { "k8s.pod.uid": victimUid },
      } satisfies Record<string, SpanDef["resource"]>;
      // "The operator noticed": an ERROR reconcile that would hide the silent loss.
      const noticed = (traceId: string, resource: SpanDef["resource"]): SpanDef[] => [reconcile(traceId, resource, { status: SpanStatusCode.ERROR })];

      const forgerPodText = `(pod ${namespace}/${forgerPod.metadata.name})`;
      const tally = { http: { sent: 0, refused: 0 }, grpc: { sent: 0, refused: 0 } };
      const forgeries: [string, SpanDef[]][] = [
        ["pid and pod", noticed("b1".repeat(16), victimClaims.all)],
        ["pid and pod", conflict("b2".repeat(16), "w99", victimClaims.all)],
        ["pod", noticed("b3".repeat(16), victimClaims.pod)],
        ["pid", conflict("b4".repeat(16), "w99", victimClaims.pid)],
        ["uid", noticed("b5".repeat(16), victimClaims.uid)],
      ];
      for (const [claim, spans] of forgeries) {
        const answer = await forger.send(JSON.stringify({ cmd: "post", contentType: "application/json", body: jsonBody(spans).toString("utf8") }), `a forged post (${claim})`);
        tally.http.sent += spans.length;
        if (answer.status === 403) tally.http.refused += spans.length;
        assert.equal(answer.status, 403, `forged over HTTP, claiming the victim's ${claim}: ${String(answer.text)}`);
        assert.ok(String(answer.text).includes(`but the connection is lwforger[${forger.pid}] ${forgerPodText}'s`), String(answer.text));
      }
      const grpcForgeries: [string, SpanDef[]][] = [
        ["pid and pod", noticed("c1".repeat(16), victimClaims.all)],
        ["pod", conflict("c2".repeat(16), "w99", victimClaims.pod)],
        ["uid", conflict("c3".repeat(16), "w99", victimClaims.uid)],
      ];
      for (const [claim, spans] of grpcForgeries) {
        const result = await grpcForger.send(JSON.stringify(spans), `a forged gRPC export (${claim})`);
        tally.grpc.sent += spans.length;
        if (result.code === 1) tally.grpc.refused += spans.length;
        assert.equal(result.code, 1, `forged over gRPC, claiming the victim's ${claim}: PERMISSION_DENIED is an export failure`);
        assert.match(String(result.error), new RegExp(`but the connection is \\w+\\[${grpcForger.pid}\\] \\(pod ${namespace}/${forgerPod.metadata.name}\\)'s`));
      }
      const refusedRequests = forgeries.length + grpcForgeries.length;
      assert.equal(await running.metric("lostwrite_spans_rejected_total", { reason: "sender_mismatch" }), refusedRequests, "every forged request counted");
      assert.equal(await running.metric("lostwrite_spans_rejected_total"), refusedRequests, "for no other reason");
      assert.equal(await running.metric("lostwrite_spans_received_total"), 0);
      const logged = running.stderr.find((l) => l.includes("spans refused"));
      assert.ok(logged?.includes(`lwforger[${forger.pid}] ${forgerPodText}`) && logged.includes(`target lwvictim[${victim.pid}]`), `one log line naming the claimed and the actual sender: ${logged}`);

      // The victim's own span, with every claim its own, from its own process.
      const own = reconcile("a1".repeat(16), victimClaims.all);
      const mine = await victim.send(JSON.stringify({ cmd: "post", contentType: "application/json", body: jsonBody([own]).toString("utf8") }), "the victim's own post");
      assert.equal(mine.status, 200, String(mine.text));
      assert.equal(await running.metric("lostwrite_spans_received_total"), 1, "only the victim's own");

      const lost = await victim.send(JSON.stringify({ cmd: "lose_write" }), "lose_write");
      assert.equal(lost.closed, true, JSON.stringify(lost));
      await waitFor("the victim's lost write", () => running.events.some((e) => e.pid === victim.pid), 20_000);
      const losses = running.events.filter((e) => e.pid === victim.pid);
      for (const event of losses) {
        const context = JSON.stringify(event);
        assert.equal(event.correlation, "span", context);
        assert.equal(event.trace_id, own.traceId, `the victim's own span, not a forged one: ${context}`);
        assert.equal(event.noticed, "no", `no forged ERROR span hid the silent loss: ${context}`);
        assert.deepEqual([event.namespace, event.pod], [namespace, victimName], context);
      }
      // The victim's own 409 is a loss; sent before it, the forged ones would be out by now.
      const real = await victim.send(JSON.stringify({ cmd: "post", contentType: "application/json", body: jsonBody(conflict("f6".repeat(16), "w98", victimClaims.all)).toString("utf8") }), "the victim's own 409");
      assert.equal(real.status, 200, String(real.text));
      await waitFor("the victim's own 409", () => running.events.some((e) => e.cause === "http_rejected" && e.reconcile?.name === "w98"), 20_000);
      const forgedTraces = new Set([...forgeries, ...grpcForgeries].flatMap(([, spans]) => spans.map((s) => s.traceId)));
      const invented = running.events.filter((e) => e.reconcile?.name === "w99" || (e.trace_id !== null && forgedTraces.has(e.trace_id)));
      assert.deepEqual(invented, [], "no loss invented, none joined with a forged span");
      assert.equal(await running.metric("lostwrite_span_losses_untrusted_total"), 0, "refused spans are not even looked at");

      const sent = tally.http.sent + tally.grpc.sent;
      const refused = tally.http.refused + tally.grpc.refused;
      assert.deepEqual([sent, refused], [12, 12]);
      console.log(
        `forged spans (Kubernetes mode, host network): sent ${sent}, refused ${refused}, accepted ${sent - refused}` +
          ` (HTTP ${tally.http.refused}/${tally.http.sent}, gRPC ${tally.grpc.refused}/${tally.grpc.sent} refused)`,
      );
    });
  });
}
