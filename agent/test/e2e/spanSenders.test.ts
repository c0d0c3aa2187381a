// Who may send spans, end to end: the agent with --kubernetes and real
// probes, an operator stand-in in a pod's cgroup, and span senders at real
// addresses of their own. The pod's address is 10.213.0.2, in a second
// network namespace joined to the agent's by a veth pair; 10.213.0.3 there,
// and 10.213.1.2 in a third namespace, are no pod of the node. Spoofers send
// an ERROR reconcile span in the pod's name, over OTLP/HTTP and OTLP/gRPC (the
// SDK's exporter), which would turn the pod's silent loss into a noticed one:
// they are refused and counted. The pod's own spans, sent without any k8s.*
// attribute, are matched by its address and decide `noticed: "no"`.
//
// All of it runs in network namespaces the test creates: the file re-runs
// itself under `unshare --net`, so the veth pair and every socket live in a
// namespace of its own and nothing reaches another address.
import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import { protobufBody, type SpanDef } from "../unit/sources/spans/otlpSpans.ts";
import { faultyApiserver, portOf } from "./support/faultyApiserver.ts";
import { startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { assertKernelRequirements, missingKernelRequirements } from "./support/kernelRequirements.ts";
import { NODE, control, makeContainerCgroup, kubernetesSlice, podFor, whyCannotRun } from "./support/kubeFixtures.ts";

const HERE = fileURLToPath(import.meta.url);
const CLIENT = path.join(path.dirname(HERE), "clients/lw_client.py");
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

function tool(name: string): string | null {
  return spawnSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).stdout.trim() || null;
}
const reasons = [
  ...missingKernelRequirements(),
  (await whyCannotRun()) ?? "",
  tool("unshare") ? "" : "unshare (util-linux) not on PATH",
  tool("ip") ? "" : "ip (iproute2) not on PATH",
].filter(Boolean);
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
      // NODE_TEST_CONTEXT would make the inner `node --test` skip its file as a recursive run.
      const env = { ...process.env };
      delete env.NODE_TEST_CONTEXT;
      const run = spawnSync("unshare", ["--net", "--", process.execPath, "--test", "--test-reporter=spec", "--test-timeout=200000", HERE], {
        env: { ...env, SPAN_SENDERS_E2E_IN_OWN_NETNS: "1" },
        encoding: "utf8",
        timeout: 220_000,
      });
      process.stdout.write(run.stdout);
      process.stderr.write(run.stderr);
      assert.equal(run.status, 0, `the scenario in its own network namespace failed (status ${run.status}, signal ${run.signal})`);
      assert.match(run.stdout, /ℹ pass 1\b/, "the scenario ran and passed");
    });
  });
} else {
  describe("span senders", { timeout: 200_000 }, () => {
    const cleanup: (() => Promise<unknown> | void)[] = [];
    after(async () => {
      for (const step of cleanup.reverse()) await Promise.resolve(step()).catch(() => undefined);
    });

    it("refuses and counts a span in a pod's name from elsewhere; the pod's own span, matched by its address, decides noticed", async () => {
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
      const faulty = await faultyApiserver();
      cleanup.push(() => void faulty.close());

      const pod = podFor(containerId) as { status: Record<string, unknown>; metadata: { name: string; namespace: string } };
      pod.status = { ...pod.status, podIP: POD_ADDRESS, podIPs: [{ ip: POD_ADDRESS }], hostIP: AGENT_ADDRESS, hostIPs: [{ ip: AGENT_ADDRESS }] };
      await control(api, "POST", "/objects", pod);
      await control(api, "POST", "/objects", kubernetesSlice(["127.0.0.1"], portOf(faulty)));

      const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
      const manager = path.join(dir, "manager");
      await symlink(python, manager);
      const client: ChildProcess = spawn(manager, [CLIENT, "plain_reset", "127.0.0.1", String(portOf(faulty))], { stdio: ["pipe", "ignore", "inherit"] });
      cleanup.push(() => void client.kill("SIGKILL"));
      await writeFile(path.join(containerCgroup, "cgroup.procs"), String(client.pid));

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
      await waitFor("the agent to watch the pod's process", () => agent.stderr.some((l) => l.includes(`manager[${client.pid}]`)), 10_000);

      // Reconcile spans open around the write about to fail. The pod's own
      // says nothing of errors (the operator swallowed it) and names no pod.
      const now = Date.now();
      const span = (traceId: string, over: Partial<SpanDef>): SpanDef => ({
        traceId,
        spanId: traceId.slice(0, 16),
        name: "reconcile widget",
        startMs: now - 1_000,
        endMs: now + 60_000, // open well past the failure, however slow the senders are to start
        attributes: { controller: "widget", controllerKind: "Widget", namespace: "widgets", name: "w1" },
        ...over,
      });
      const own = span("a1".repeat(16), { resource: { "process.pid": client.pid!, "service.name": "widget-operator" } });
      const spoofed = span("b2".repeat(16), {
        status: 2, // ERROR: "the operator noticed"
        resource: { "process.pid": client.pid!, "k8s.pod.name": pod.metadata.name, "k8s.namespace.name": pod.metadata.namespace },
      });
      const ownFile = path.join(dir, "own.pb");
      const spoofedFile = path.join(dir, "spoofed.pb");
      await writeFile(ownFile, protobufBody([own]));
      await writeFile(spoofedFile, protobufBody([spoofed]));

      const stranger = postFrom(python, netns, STRANGER_ADDRESS, spoofedFile);
      assert.equal(stranger.status, 403, stranger.text);
      assert.match(stranger.text, new RegExp(`sender ${STRANGER_ADDRESS.replaceAll(".", "\\.")} is not a pod of this node`));
      // The node's own address (loopback here) cannot speak for a pod either.
      const fromNode = await fetch(`http://127.0.0.1:${OTLP_PORT}/v1/traces`, {
        method: "POST",
        headers: { "content-type": "application/x-protobuf" },
        body: protobufBody([spoofed]),
      });
      assert.equal(fromNode.status, 403);
      // The same spoof over gRPC from the third namespace: PERMISSION_DENIED, which the exporter reports as a failure.
      const grpcStranger = grpcExportFrom(strangers, GRPC_STRANGER_AGENT_SIDE, [{ ...spoofed, spanId: "c3".repeat(8) }]);
      assert.equal(grpcStranger.code, 1);
      assert.match(grpcStranger.error ?? "", new RegExp(`${GRPC_STRANGER_ADDRESS.replaceAll(".", "\\.")} is not a pod of this node`));
      const mine = postFrom(python, netns, POD_ADDRESS, ownFile);
      assert.equal(mine.status, 200, mine.text);
      // The pod's client span of the write, over gRPC from the pod's address, also with no k8s.* attribute.
      const patch = span(own.traceId, {
        spanId: "d4".repeat(8),
        parentSpanId: own.spanId,
        name: "PATCH",
        kind: 3, // CLIENT
        attributes: { "http.request.method": "PATCH", "url.path": "/apis/example.com/v1/namespaces/widgets/widgets/w1/status" },
        resource: own.resource,
      });
      const grpcMine = grpcExportFrom(netns, AGENT_ADDRESS, [patch]);
      assert.equal(grpcMine.code, 0, grpcMine.error ?? "");
      assert.equal(await agent.metric("lostwrite_spans_rejected_total", { reason: "unknown_sender" }), 2);
      assert.equal(await agent.metric("lostwrite_spans_rejected_total", { reason: "sender_mismatch" }), 1);
      assert.equal(await agent.metric("lostwrite_spans_received_total", {}), 2);

      client.stdin!.end("go\n");
      await waitFor("the pod's lost write", () => agent.events.some((e) => e.pid === client.pid && e.cause === "write_failed"), 15_000);
      const losses = agent.events.filter((e) => e.pid === client.pid);
      for (const event of losses) {
        assert.equal(event.correlation, "span", JSON.stringify(event));
        assert.equal(event.trace_id, own.traceId, "the pod's own span, not the spoofed one");
        assert.equal(event.noticed, "no", "the spoofed ERROR span did not hide the silent loss");
        assert.deepEqual([event.namespace, event.pod], [pod.metadata.namespace, pod.metadata.name]);
      }
    });
  });
}
