// Who may send spans, end to end: the agent with --kubernetes and real
// probes, an operator stand-in (`manager`) in a pod's cgroup and in the pod's
// own network namespace, sending its spans from its own process, as an SDK's
// exporter does. The pod's address is 10.213.0.2, in a second network
// namespace joined to the agent's by a veth pair; 10.213.0.3 there, and
// 10.213.1.2 in a third namespace, are no pod of the node. Spoofers send an
// ERROR reconcile span in the manager's name, over OTLP/HTTP and OTLP/gRPC (the
// SDK's exporter), which would turn its silent loss into a noticed one, and a
// status PATCH answered 409 that it never had: from elsewhere, from the node,
// and from other processes inside the pod's own network (its address, but not
// its process). They are refused and counted. The manager's own spans, sent
// without any k8s.* attribute, are matched by the process holding their
// connection and decide `noticed: "no"`.
//
// All of it runs in network namespaces the test creates: the file re-runs
// itself under `unshare --net`, so the veth pair and every socket live in a
// namespace of its own and nothing reaches another address.
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { SpanStatusCode } from "@opentelemetry/api";
import { createInterface } from "node:readline";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import { jsonBody, openReconcile, protobufBody, refusedStatusPatch, type SpanDef } from "../unit/sources/spans/otlpSpans.ts";
import { faultyApiserver, portOf } from "./support/faultyApiserver.ts";
import { startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { assertKernelRequirements, missingKernelRequirements } from "./support/kernelRequirements.ts";
import { NODE, control, makeContainerCgroup, kubernetesSlice, podFor, whyCannotRun } from "./support/kubeFixtures.ts";
import { runInOwnNetworkNamespace, whyNoOwnNetworkNamespace } from "./support/ownNetworkNamespace.ts";

const HERE = fileURLToPath(import.meta.url);
const SENDER = path.join(path.dirname(HERE), "clients/lw_span_sender.py");
const IN_NETNS = process.env.SPAN_SENDERS_E2E_IN_OWN_NETNS === "1";
const AGENT_ADDRESS = "10.213.0.1";
const POD_ADDRESS = "10.213.0.2";
const STRANGER_ADDRESS = "10.213.0.3";
const GRPC_STRANGER_AGENT_SIDE = "10.213.1.1";
const GRPC_STRANGER_ADDRESS = "10.213.1.2";
const OTLP_PORT = 4318;
const OTLP_GRPC_PORT = 4317;
const GRPC_EXPORT = path.join(path.dirname(HERE), "clients/otlpGrpcExport.ts");
const NODE_BIN = path.join(path.dirname(HERE), "../../../node_modules/.bin/node");

const reasons = [...missingKernelRequirements(), (await whyCannotRun()) ?? "", whyNoOwnNetworkNamespace() ?? ""].filter(Boolean);
const skip = reasons.length && process.env.CI !== "true" ? reasons.join("; ") : false;

function ip(...args: string[]): void {
  execFileSync("ip", args, { stdio: ["ignore", "ignore", "inherit"] });
}

/** POSTs an OTLP protobuf body from `source` inside netns `netns`: the HTTP status and body text. */
function postFrom(python: string, netns: string, source: string, file: string): { status: number; text: string } {
  const script = [
    "import http.client, sys",
    "c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), source_address=(sys.argv[3], 0), timeout=10)",
    "c.request('POST', '/v1/traces', open(sys.argv[4], 'rb').read(), {'content-type': 'application/x-protobuf'})",
    "r = c.getresponse()",
    "print(r.status)",
    "print(r.read().decode('utf-8', 'replace'))",
  ].join("\n");
  const out = execFileSync("ip", ["netns", "exec", netns, python, "-c", script, AGENT_ADDRESS, String(OTLP_PORT), source, file], { encoding: "utf8" });
  const [status, ...text] = out.split("\n");
  return { status: Number(status), text: text.join("\n") };
}

/** Exports `spans` with the SDK's OTLP/gRPC exporter from inside netns `netns`, to the agent at `agentAddress`. */
function grpcExportFrom(netns: string, agentAddress: string, spans: SpanDef[]): { code: number; error: string | null } {
  const out = execFileSync("ip", ["netns", "exec", netns, NODE_BIN, GRPC_EXPORT, `http://${agentAddress}:${OTLP_GRPC_PORT}`, JSON.stringify(spans)], { encoding: "utf8" });
  return JSON.parse(out.trim().split("\n").pop() ?? "{}") as { code: number; error: string | null };
}

if (!IN_NETNS) {
  describe("span senders (in a network namespace of its own)", { skip, timeout: 240_000 }, () => {
    it("runs the scenario under unshare --net", () => {
      assertKernelRequirements();
      runInOwnNetworkNamespace(HERE, "SPAN_SENDERS_E2E_IN_OWN_NETNS", { timeoutMs: 220_000, tests: 1 });
    });
  });
} else {
  describe("span senders", { timeout: 200_000 }, () => {
    const cleanup: (() => Promise<unknown> | void)[] = [];
    after(async () => {
      for (const step of cleanup.reverse()) await Promise.resolve(step()).catch(() => undefined);
    });

    it("refuses and counts a span in the manager's name from elsewhere and from its own pod's network; its own span, matched by its connection, decides noticed", async () => {
      assert.equal(await whyCannotRun(), null);
      // This namespace and one for the senders, joined by a veth pair.
      const netns = `lw-senders-${process.pid}`;
      ip("link", "set", "lo", "up");
      ip("netns", "add", netns);
      cleanup.push(() => ip("netns", "del", netns));
      ip("link", "add", "lw-agent0", "type", "veth", "peer", "name", "lw-pod0", "netns", netns);
      ip("addr", "add", `${AGENT_ADDRESS}/24`, "dev", "lw-agent0");
      ip("link", "set", "lw-agent0", "up");
      ip("-n", netns, "addr", "add", `${POD_ADDRESS}/24`, "dev", "lw-pod0");
      ip("-n", netns, "addr", "add", `${STRANGER_ADDRESS}/24`, "dev", "lw-pod0");
      ip("-n", netns, "link", "set", "lw-pod0", "up");
      ip("-n", netns, "link", "set", "lo", "up");
      // A third namespace, for a gRPC sender that is no pod (the exporter cannot pick its source address).
      const strangers = `lw-strangers-${process.pid}`;
      ip("netns", "add", strangers);
      cleanup.push(() => ip("netns", "del", strangers));
      ip("link", "add", "lw-agent1", "type", "veth", "peer", "name", "lw-str0", "netns", strangers);
      ip("addr", "add", `${GRPC_STRANGER_AGENT_SIDE}/24`, "dev", "lw-agent1");
      ip("link", "set", "lw-agent1", "up");
      ip("-n", strangers, "addr", "add", `${GRPC_STRANGER_ADDRESS}/24`, "dev", "lw-str0");
      ip("-n", strangers, "link", "set", "lw-str0", "up");

      const dir = await mkdtemp(path.join(os.tmpdir(), "lostwrite-senders-"));
      cleanup.push(() => rm(dir, { recursive: true, force: true }));
      const { containerId, path: containerCgroup } = await makeContainerCgroup("senders", cleanup);
      const api: Apiserver = await startApiserver({ dir: path.join(dir, "apiserver") });
      cleanup.push(() => api.close());
      // The apiserver stand-in on the agent's side of the veth, where the pod reaches it.
      const faulty = await faultyApiserver(AGENT_ADDRESS);
      cleanup.push(() => void faulty.close());

      const pod = podFor(containerId) as { status: Record<string, unknown>; metadata: { name: string; namespace: string } };
      pod.status = { ...pod.status, podIP: POD_ADDRESS, podIPs: [{ ip: POD_ADDRESS }], hostIP: AGENT_ADDRESS, hostIPs: [{ ip: AGENT_ADDRESS }] };
      await control(api, "POST", "/objects", pod);
      await control(api, "POST", "/objects", kubernetesSlice([AGENT_ADDRESS], portOf(faulty)));

      // The manager: in the pod's cgroup and its network, sending its spans itself.
      const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
      const managerPath = path.join(dir, "manager");
      await symlink(python, managerPath);
      const manager: ChildProcess = spawn("ip", ["netns", "exec", netns, managerPath, SENDER, AGENT_ADDRESS, String(OTLP_PORT)], { stdio: ["pipe", "pipe", "inherit"] });
      cleanup.push(() => void manager.kill("SIGKILL"));
      await writeFile(path.join(containerCgroup, "cgroup.procs"), String(manager.pid));
      const answers: Record<string, unknown>[] = [];
      createInterface({ input: manager.stdout! }).on("line", (line) => answers.push(JSON.parse(line) as Record<string, unknown>));
      const run = async (command: Record<string, unknown>): Promise<Record<string, unknown>> => {
        const before = answers.length;
        manager.stdin!.write(`${JSON.stringify(command)}\n`);
        await waitFor(`the manager's ${String(command.cmd)}`, () => answers.length > before, 20_000);
        return answers[before]!;
      };

      const agent: AgentProcess = await startAgentProcess(
        [
          "--kubernetes", "--kubeconfig", api.kubeconfigPath, "--node-name", NODE,
          "--otlp-listen", `0.0.0.0:${OTLP_PORT}`,
          "--otlp-grpc-listen", `0.0.0.0:${OTLP_GRPC_PORT}`,
          "--correlation-window", "3s",
        ],
        { KUBERNETES_SERVICE_HOST: "", KUBERNETES_SERVICE_PORT: "" },
      );
      cleanup.push(() => agent.stop());
      const managerName = `manager[${manager.pid}]`;
      await waitFor("the agent to watch the pod's process", () => agent.stderr.some((l) => l.includes(managerName)), 10_000);
      assert.equal((await run({ cmd: "connect_api", host: AGENT_ADDRESS, port: portOf(faulty) })).step, "connect_api");

      // Reconcile spans open around the write about to fail. The manager's own
      // says nothing of errors (the operator swallowed it) and names no pod.
      const now = Date.now();
      const span = (traceId: string, over: Partial<SpanDef>): SpanDef => openReconcile(traceId, now, over);
      const managerResource = { "process.pid": manager.pid!, "service.name": "widget-operator" };
      /** A reconcile of `name` whose status PATCH was answered 409: a loss seen only in spans. */
      const conflict = (traceId: string, name: string, resource: SpanDef["resource"]): SpanDef[] => {
        const parent = span(traceId, { endMs: now + 200, attributes: { controller: "widget", controllerKind: "Widget", namespace: "widgets", name }, resource });
        return refusedStatusPatch(parent, `/apis/example.com/v1/namespaces/widgets/widgets/${name}/status`, 409, now);
      };
      const own = span("a1".repeat(16), { resource: managerResource });
      const spoofed = span("b2".repeat(16), {
        status: SpanStatusCode.ERROR, // "the operator noticed"
        resource: { "process.pid": manager.pid!, "k8s.pod.name": pod.metadata.name, "k8s.namespace.name": pod.metadata.namespace },
      });
      const spoofedFile = path.join(dir, "spoofed.pb");
      const inventedFile = path.join(dir, "invented.pb");
      await writeFile(spoofedFile, protobufBody([spoofed]));
      await writeFile(inventedFile, protobufBody(conflict("c3".repeat(16), "w99", managerResource)));
      const forged = { sent: 0, refused: 0 };
      const refused = (spans: number, ok: boolean): void => {
        forged.sent += spans;
        if (ok) forged.refused += spans;
      };

      const stranger = postFrom(python, netns, STRANGER_ADDRESS, spoofedFile);
      refused(1, stranger.status === 403);
      assert.equal(stranger.status, 403, stranger.text);
      assert.match(stranger.text, new RegExp(`sender ${STRANGER_ADDRESS.replaceAll(".", "\\.")} is not a pod of this node`));
      // The node's own address (loopback here) cannot speak for a pod either.
      const fromNode = await fetch(`http://127.0.0.1:${OTLP_PORT}/v1/traces`, {
        method: "POST",
        headers: { "content-type": "application/x-protobuf" },
        body: protobufBody([spoofed]),
      });
      refused(1, fromNode.status === 403);
      assert.equal(fromNode.status, 403);
      // The same spoof over gRPC from the third namespace: PERMISSION_DENIED, which the exporter reports as a failure.
      const grpcStranger = grpcExportFrom(strangers, GRPC_STRANGER_AGENT_SIDE, [{ ...spoofed, spanId: "c3".repeat(8) }]);
      refused(1, grpcStranger.code === 1);
      assert.equal(grpcStranger.code, 1);
      assert.match(grpcStranger.error ?? "", new RegExp(`${GRPC_STRANGER_ADDRESS.replaceAll(".", "\\.")} is not a pod of this node`));

      // Inside the pod's own network: its address, but not its process. The
      // address alone would make these the pod's; the connection says whose they are.
      const target = new RegExp(`process\\.pid=${manager.pid} \\(target manager\\[${manager.pid}\\] \\(pod ${pod.metadata.namespace}/${pod.metadata.name}\\)\\)`);
      for (const [file, spans] of [[spoofedFile, 1], [inventedFile, 2]] as const) {
        const inPod = postFrom(python, netns, POD_ADDRESS, file);
        refused(spans, inPod.status === 403);
        assert.equal(inPod.status, 403, inPod.text);
        assert.match(inPod.text, target);
      }
      const grpcInPod = grpcExportFrom(netns, AGENT_ADDRESS, [{ ...spoofed, spanId: "e5".repeat(8) }]);
      refused(1, grpcInPod.code === 1);
      assert.equal(grpcInPod.code, 1, "PERMISSION_DENIED");
      assert.match(grpcInPod.error ?? "", target);

      const mine = await run({ cmd: "post", contentType: "application/json", body: jsonBody([own]).toString("utf8") });
      assert.equal(mine.status, 200, String(mine.text));
      assert.equal(await agent.metric("lostwrite_spans_rejected_total", { reason: "unknown_sender" }), 2);
      assert.equal(await agent.metric("lostwrite_spans_rejected_total", { reason: "sender_mismatch" }), 4);
      assert.equal(await agent.metric("lostwrite_spans_received_total", {}), 1, "only the manager's own");
      const logged = agent.stderr.find((l) => l.includes("spans refused"));
      assert.ok(logged?.includes(`target ${managerName}`), `one log line naming the claimed and the actual sender: ${logged}`);

      const lost = await run({ cmd: "lose_write" });
      assert.equal(lost.closed, true, JSON.stringify(lost));
      await waitFor("the pod's lost write", () => agent.events.some((e) => e.pid === manager.pid), 15_000);
      const losses = agent.events.filter((e) => e.pid === manager.pid);
      for (const event of losses) {
        assert.equal(event.correlation, "span", JSON.stringify(event));
        assert.equal(event.trace_id, own.traceId, "the pod's own span, not the spoofed one");
        assert.equal(event.noticed, "no", "the spoofed ERROR span did not hide the silent loss");
        assert.deepEqual([event.namespace, event.pod], [pod.metadata.namespace, pod.metadata.name]);
      }
      // The manager's own 409 is a loss; sent before it, the forged one would be out by now.
      const real = await run({ cmd: "post", contentType: "application/json", body: jsonBody(conflict("f6".repeat(16), "w98", managerResource)).toString("utf8") });
      assert.equal(real.status, 200, String(real.text));
      await waitFor("the manager's own 409", () => agent.events.some((e) => e.cause === "http_rejected" && e.reconcile?.name === "w98"), 15_000);
      assert.deepEqual(agent.events.filter((e) => e.reconcile?.name === "w99"), [], "no loss invented");
      assert.deepEqual([forged.sent, forged.refused], [7, 7]);
      console.log(`forged spans (Kubernetes mode, pod network): sent ${forged.sent}, refused ${forged.refused}, accepted ${forged.sent - forged.refused}`);
    });
  });
}
