import { test } from "node:test";
import assert from "node:assert/strict";
import {
  containerFromCgroupFile,
  containerFromCgroupPath,
  containerFromStatusId,
  parseCgroupFile,
  readContainerOf,
} from "../../../../src/sources/targets/cgroup.ts";
import { repoPath } from "../../../repoPath.ts";

const PROC = repoPath("agent/test/fixtures/proc") + "/";
const MANAGER = "6ee4a469cd4e91053847f5d3fcb61dbcc91e8f0ef10be7748da4c4a1ba382d17";
const SIDECAR = "6c8b4535ccc87f19061c4646189e33d78f01c8b63dc4e3cb2f630b1796ee93b6";
const PLAIN_DOCKER = "942bb6ee81422744729fee83e3455071452b9a6c22ced746aa5a3c9a8528a172";

// [tree, pid, expected container] for every runtime, driver and cgroup version.
const cases: [string, number, { runtime: string | null; id: string } | null][] = [
  ["containerd-v2-systemd", 4242, { runtime: "containerd", id: MANAGER }],
  ["containerd-v2-systemd", 4250, { runtime: "containerd", id: MANAGER }],
  ["containerd-v2-systemd", 4300, { runtime: "containerd", id: SIDECAR }],
  ["containerd-v2-systemd", 1, null],
  ["containerd-v2-systemd", 900, null],
  ["containerd-v2-cgroupfs", 4242, { runtime: null, id: MANAGER }],
  ["containerd-v2-cgroupfs", 1, null],
  ["containerd-v2-cgroupns", 4242, { runtime: "containerd", id: MANAGER }],
  ["containerd-v2-cgroupns", 4260, { runtime: "containerd", id: MANAGER }],
  ["containerd-v1-cgroupfs", 4242, { runtime: null, id: MANAGER }],
  ["containerd-v1-cgroupfs", 1, null],
  ["crio-v2-systemd", 4242, { runtime: "cri-o", id: MANAGER }],
  ["crio-v2-systemd", 4240, null],
  ["crio-v1-cgroupfs", 4242, { runtime: "cri-o", id: MANAGER }],
  ["docker-v1-cgroupfs", 4242, { runtime: null, id: MANAGER }],
  ["docker-v1-cgroupfs", 5000, { runtime: "docker", id: PLAIN_DOCKER }],
  ["docker-v2-systemd", 4242, { runtime: "docker", id: MANAGER }],
  ["docker-v2-systemd", 5000, { runtime: "docker", id: PLAIN_DOCKER }],
  ["docker-v2-systemd", 1, null],
  ["hybrid-v1-v2", 4242, { runtime: "containerd", id: MANAGER }],
];

for (const [tree, pid, expected] of cases) {
  void test(`container of ${tree}/${pid} is ${expected ? expected.id.slice(0, 12) : "none"}`, () => {
    assert.deepEqual(readContainerOf(PROC + tree, pid), expected);
  });
}

void test("a process that is gone has no container, and reading it does not throw", () => {
  assert.equal(readContainerOf(PROC + "containerd-v2-systemd", 999999), null);
});

void test("pod status containerIDs map to the same id as the cgroup side", () => {
  assert.deepEqual(containerFromStatusId(`containerd://${MANAGER}`), { runtime: "containerd", id: MANAGER });
  assert.deepEqual(containerFromStatusId(`cri-o://${MANAGER}`), { runtime: "cri-o", id: MANAGER });
  assert.deepEqual(containerFromStatusId(`docker://${MANAGER.toUpperCase()}`), { runtime: "docker", id: MANAGER });
  // A container that has not started yet has an empty id; other runtimes are not guessed.
  assert.equal(containerFromStatusId(""), null);
  assert.equal(containerFromStatusId(`containerd://${MANAGER.slice(1)}`), null);
  assert.equal(containerFromStatusId(`rkt://${MANAGER}`), null);
});

void test("v1 lines keep their controllers and paths with ':' survive", () => {
  assert.deepEqual(parseCgroupFile("10:cpu,cpuacct:/a:b\n0::/x\ngarbage\n-1::/y\n"), [
    { hierarchy: 10, controllers: ["cpu", "cpuacct"], path: "/a:b" },
    { hierarchy: 0, controllers: [], path: "/x" },
  ]);
});

void test("ids that are not 64 hex characters and look-alike names do not match", () => {
  assert.equal(containerFromCgroupPath(`/kubepods/pod1/${MANAGER.slice(0, 63)}`), null);
  assert.equal(containerFromCgroupPath(`/system.slice/cri-containerd-${MANAGER}.service`), null);
  assert.equal(containerFromCgroupPath(`/kubepods/crio-conmon-${MANAGER}`), null);
  assert.equal(containerFromCgroupFile(""), null);
});
