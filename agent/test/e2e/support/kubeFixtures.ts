// What the Kubernetes e2e tests share: a cgroup v2 hierarchy to put a real
// process in (named the way containerd names a container's cgroup), and the
// pod and EndpointSlice objects the testbed apiserver serves for this node.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rmdir } from "node:fs/promises";
import { join } from "node:path";
import type { Apiserver } from "../../../../testbed/apiserver/apiserver.ts";

export const NODE = "node-e2e";

/**
 * A container's cgroup as containerd names it, under a pod slice named for
 * this test (`name`) and process, in the cgroup v2 hierarchy; `cleanup` gets
 * what removes both. Move a process in by writing its pid to `path`/cgroup.procs.
 */
export async function makeContainerCgroup(name: string, cleanup: (() => Promise<unknown> | void)[]): Promise<{ containerId: string; path: string }> {
  const mount = await cgroup2Mount();
  assert.ok(mount !== null, "a cgroup v2 hierarchy is mounted");
  const containerId = randomBytes(32).toString("hex");
  const podCgroup = join(mount, `lostwrite-${name}-e2e-${process.pid}.slice`);
  const path = join(podCgroup, `cri-containerd-${containerId}.scope`);
  await mkdir(path, { recursive: true });
  cleanup.push(async () => {
    await rmdir(path);
    await rmdir(podCgroup);
  });
  return { containerId, path };
}

/** The mount point of the cgroup v2 hierarchy, from /proc/self/mountinfo. */
export async function cgroup2Mount(): Promise<string | null> {
  const mountinfo = await readFile("/proc/self/mountinfo", "utf8");
  for (const line of mountinfo.split("\n")) {
    // "... mountpoint options - fstype source superoptions"
    const [left, right] = line.split(" - ");
    if (right?.split(" ")[0] === "cgroup2") return left?.split(" ")[4] ?? null;
  }
  return null;
}

export async function whyCannotRun(): Promise<string | null> {
  if (process.getuid?.() !== 0) return "needs root to create a cgroup";
  const mount = await cgroup2Mount();
  if (mount === null) return "no cgroup2 hierarchy is mounted";
  const probe = join(mount, `lostwrite-e2e-probe-${process.pid}`);
  try {
    await mkdir(probe);
    await rmdir(probe);
  } catch (err) {
    return `cannot create a cgroup under ${mount}: ${(err as Error).message}`;
  }
  return null;
}


/** A call to the testbed apiserver's control API: its answer (POST /objects: the object as stored, with the uid it was given). */
export async function control(api: Apiserver, method: string, path: string, body?: unknown): Promise<unknown> {
  const res = await fetch(api.controlUrl + path, {
    method,
    headers: { "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${text}`);
  return text ? (JSON.parse(text) as unknown) : null;
}

export function podFor(containerId: string): Record<string, unknown> {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name: "widget-operator-5c7d8f9b4-k2v9x",
      namespace: "widgets",
      uid: "0c5b7a52-6d0e-4f4e-9f55-3b1f0c2d9e11",
      labels: { "lostwrite.dev/watch": "true", "pod-template-hash": "5c7d8f9b4" },
      ownerReferences: [{ apiVersion: "apps/v1", kind: "ReplicaSet", name: "widget-operator-5c7d8f9b4", uid: "r1", controller: true }],
    },
    spec: { nodeName: NODE, containers: [{ name: "manager", image: "widget-operator" }] },
    status: { phase: "Running", containerStatuses: [{ name: "manager", containerID: `containerd://${containerId}`, ready: true, image: "widget-operator", imageID: "", restartCount: 0 }] },
  };
}

export function kubernetesSlice(addresses: string[], port = 6443): Record<string, unknown> {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: { name: "kubernetes", namespace: "default", labels: { "kubernetes.io/service-name": "kubernetes" } },
    addressType: "IPv4",
    endpoints: addresses.map((a) => ({ addresses: [a], conditions: { ready: true } })),
    ports: [{ name: "https", port, protocol: "TCP" }],
  };
}

