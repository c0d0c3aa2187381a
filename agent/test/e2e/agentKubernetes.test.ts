// The agent with --kubernetes, end to end without a cluster: the testbed
// apiserver serves this node's pod and the `kubernetes` EndpointSlice; a real
// process in a containerd-named cgroup stands in for the operator container.
// Its lost writes are labelled with the pod's namespace, pod, container and
// controller, and when the EndpointSlice moves the apiserver to another port,
// the in-kernel filter follows.
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import { faultyApiserver } from "./support/faultyApiserver.ts";
import { startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { assertKernelRequirements, missingKernelRequirements } from "./support/kernelRequirements.ts";
import { NODE, control, makeContainerCgroup, kubernetesSlice, podFor, whyCannotRun } from "./support/kubeFixtures.ts";

const CLIENT = path.join(path.dirname(fileURLToPath(import.meta.url)), "clients/lw_client.py");
const reasons = [...missingKernelRequirements(), (await whyCannotRun()) ?? ""].filter(Boolean);
const skip = reasons.length && process.env.CI !== "true" ? reasons.join("; ") : false;

describe("agent --kubernetes", { skip, timeout: 180_000 }, () => {
  const cleanup: (() => Promise<unknown> | void)[] = [];
  after(async () => {
    for (const step of cleanup.reverse()) await Promise.resolve(step()).catch(() => undefined);
  });

  it("labels a pod's losses from its metadata and follows the apiserver's EndpointSlice", async () => {
    assertKernelRequirements();
    assert.equal(await whyCannotRun(), null);
    const dir = await mkdtemp(path.join(os.tmpdir(), "lostwrite-kube-agent-"));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const { containerId, path: containerCgroup } = await makeContainerCgroup("agent", cleanup);
    const api: Apiserver = await startApiserver({ dir: path.join(dir, "apiserver") });
    cleanup.push(() => api.close());
    const first = await faultyApiserver();
    const second = await faultyApiserver();
    cleanup.push(() => void first.close());
    cleanup.push(() => void second.close());
    const portOf = (s: net.Server): number => (s.address() as net.AddressInfo).port;

    await control(api, "POST", "/objects", podFor(containerId));
    await control(api, "POST", "/objects", kubernetesSlice(["127.0.0.1"], portOf(first)));

    const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
    const manager = path.join(dir, "manager");
    await symlink(python, manager);
    /** A client in the container's cgroup that acts when told to. */
    const startClient = async (port: number): Promise<ChildProcess> => {
      const child = spawn(manager, [CLIENT, "plain_reset", "127.0.0.1", String(port)], { stdio: ["pipe", "ignore", "inherit"] });
      await writeFile(path.join(containerCgroup, "cgroup.procs"), String(child.pid));
      cleanup.push(() => void child.kill("SIGKILL"));
      return child;
    };
    const client1 = await startClient(portOf(first));

    const agent: AgentProcess = await startAgentProcess(
      ["--kubernetes", "--kubeconfig", api.kubeconfigPath, "--node-name", NODE, "--correlation-window", "500ms"],
      { KUBERNETES_SERVICE_HOST: "", KUBERNETES_SERVICE_PORT: "" },
    );
    cleanup.push(() => agent.stop());
    await waitFor("the agent to watch the pod's process", () => agent.stderr.some((l) => l.includes(`manager[${client1.pid}]`)), 10_000);
    assert.equal(await agent.metric("lostwrite_targets", { source: "kubernetes" }), 1);

    const labels = { namespace: "widgets", pod: "widget-operator-5c7d8f9b4-k2v9x", container: "manager", process: "manager" };
    client1.stdin!.end("go\n");
    await waitFor("the pod's failed writes, labelled", async () =>
      (await agent.metric("lostwrite_apiserver_syscall_errors_total", { ...labels, syscall: "sendto", errno: "EPIPE" })) === 1,
    );
    await waitFor("the loss, labelled with the owner", async () =>
      (await agent.metric("lostwrite_status_write_lost_total", { ...labels, controller: "widget-operator", cause: "write_failed" })) === 1,
    );
    const event = agent.events.find((e) => e.cause === "write_failed");
    assert.deepEqual([event?.namespace, event?.pod, event?.container], ["widgets", labels.pod, "manager"]);

    // The apiserver moves to another port: writes there are watched, the old port no longer.
    await control(api, "POST", "/objects", kubernetesSlice(["127.0.0.1"], portOf(second)));
    await waitFor("the endpoint change to reach the probe", () =>
      agent.stderr.some((l) => l.includes("apiserver endpoints") && l.includes(`127.0.0.1:${portOf(second)}`) && !l.includes(`127.0.0.1:${portOf(first)}"`)),
    );
    const client2 = await startClient(portOf(second));
    const client3 = await startClient(portOf(first));
    await waitFor("the new processes to be watched", () =>
      [client2, client3].every((c) => agent.stderr.some((l) => l.includes(`manager[${c.pid}]`))), 10_000);
    const exited = (c: ChildProcess) => new Promise((resolve) => c.once("exit", resolve));
    client2.stdin!.end("go\n");
    client3.stdin!.end("go\n");
    await Promise.all([exited(client2), exited(client3)]);
    // One event per dead connection: its first failed send (the second is counted only).
    await waitFor("the failure on the new endpoint", () => agent.events.filter((e) => e.apiserver === `127.0.0.1:${portOf(second)}` && e.cause === "write_failed").length === 1);
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(agent.events.filter((e) => e.apiserver === `127.0.0.1:${portOf(second)}`).length, 1);
    assert.equal(agent.events.filter((e) => e.apiserver === `127.0.0.1:${portOf(first)}`).length, 1, "the old endpoint is no longer watched");
  });
});
