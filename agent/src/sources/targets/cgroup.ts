// Container identity from the kernel's side: which container a process runs
// in, read from /proc/<pid>/cgroup, in the same form as the pod status'
// `containerID`, so the two can be joined without asking the runtime.
//
// Runtimes name a container's cgroup after its 64-hex id, in a few shapes:
//
//   containerd, systemd driver   …/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope
//   containerd, cgroupfs driver  /kubepods/burstable/pod<uid>/<id>
//   CRI-O, systemd driver        …/kubepods-pod<uid>.slice/crio-<id>.scope
//   CRI-O, cgroupfs driver       /kubepods/pod<uid>/crio-<id>
//   Docker, systemd driver       /system.slice/docker-<id>.scope (or under kubepods.slice)
//   Docker, cgroupfs driver      /docker/<id>, /kubepods/besteffort/pod<uid>/<id>
//
// cgroup v1 lists one line per hierarchy ("4:memory:/kubepods/…"), v2 one line
// "0::/…"; hybrid hosts show both. The path is relative to the reader's cgroup
// namespace, so an agent in its own cgroup namespace sees "/../../kubepods…":
// only the last segments matter. CRI-O's monitor runs in "crio-conmon-<id>.scope",
// which is not the container and must not match.
import { readFileSync } from "node:fs";
import { join } from "node:path";

type ContainerRuntime = "containerd" | "cri-o" | "docker";

interface ContainerRef {
  /** The runtime the id's format points to; null when the format does not say. */
  runtime: ContainerRuntime | null;
  /** Lower-case 64-hex container id. */
  id: string;
}

interface CgroupLine {
  /** Hierarchy id: 0 for cgroup v2. */
  hierarchy: number;
  /** Controllers of a v1 hierarchy ("memory", "name=systemd"); empty for v2. */
  controllers: string[];
  path: string;
}

const SCOPE = /^(cri-containerd|crio|docker)-([0-9a-f]{64})\.scope$/;
const CRIO_CGROUPFS = /^crio-([0-9a-f]{64})$/;
const BARE_ID = /^([0-9a-f]{64})$/;
const SCOPE_RUNTIME: Record<string, ContainerRuntime> = {
  "cri-containerd": "containerd",
  crio: "cri-o",
  docker: "docker",
};

/** Parses /proc/<pid>/cgroup; malformed lines are skipped. */
export function parseCgroupFile(text: string): CgroupLine[] {
  const lines: CgroupLine[] = [];
  for (const line of text.split("\n")) {
    // "hierarchy:controllers:path"; the path itself may contain ':'.
    const first = line.indexOf(":");
    const second = first < 0 ? -1 : line.indexOf(":", first + 1);
    if (second < 0) continue;
    const hierarchy = Number(line.slice(0, first));
    if (!Number.isInteger(hierarchy) || hierarchy < 0) continue;
    const controllers = line.slice(first + 1, second);
    lines.push({
      hierarchy,
      controllers: controllers === "" ? [] : controllers.split(","),
      path: line.slice(second + 1),
    });
  }
  return lines;
}

/**
 * The container a cgroup path belongs to. Searches from the deepest segment
 * up, because a container may create sub-cgroups of its own (systemd inside a
 * container, "…/cri-containerd-<id>.scope/init.scope").
 */
export function containerFromCgroupPath(path: string): ContainerRef | null {
  const segments = path.split("/").filter((s) => s !== "" && s !== "..");
  for (let i = segments.length - 1; i >= 0; i--) {
    const segment = segments[i] ?? "";
    const scope = SCOPE.exec(segment);
    if (scope) return { runtime: SCOPE_RUNTIME[scope[1] ?? ""] ?? null, id: scope[2] ?? "" };
    const crio = CRIO_CGROUPFS.exec(segment);
    if (crio) return { runtime: "cri-o", id: crio[1] ?? "" };
    const bare = BARE_ID.exec(segment);
    if (bare) {
      // A bare id says nothing about the runtime unless Docker's own parent does.
      const runtime = segments[i - 1] === "docker" ? "docker" : null;
      return { runtime, id: bare[1] ?? "" };
    }
  }
  return null;
}

/**
 * The container of a process from its /proc/<pid>/cgroup text. The v2 line
 * wins when it names a container (on hybrid hosts the runtime may use either);
 * otherwise the first v1 hierarchy that does.
 */
export function containerFromCgroupFile(text: string): ContainerRef | null {
  const lines = parseCgroupFile(text);
  const unified = lines.find((l) => l.hierarchy === 0 && l.controllers.length === 0);
  const fromUnified = unified ? containerFromCgroupPath(unified.path) : null;
  if (fromUnified) return fromUnified;
  for (const line of lines) {
    if (line === unified) continue;
    const ref = containerFromCgroupPath(line.path);
    if (ref) return ref;
  }
  return null;
}

// "pod<uid>" (cgroupfs driver) or "kubepods-<qos>-pod<uid with _ for ->.slice" (systemd driver).
const POD_SEGMENT = /^(?:kubepods(?:-[a-z]+)?-)?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$/;

/**
 * The pod UID a process's cgroup names, whatever its container: the pod's
 * cgroup outlives its containers, so a restarted container's process is known
 * to belong to its pod before the pod status names the new container id.
 */
export function podUidFromCgroupFile(text: string): string | null {
  for (const line of parseCgroupFile(text)) {
    for (const segment of line.path.split("/").reverse()) {
      const match = POD_SEGMENT.exec(segment);
      if (match) return (match[1] ?? "").replaceAll("_", "-");
    }
  }
  return null;
}

const STATUS_ID = /^(containerd|cri-o|docker):\/\/([0-9a-fA-F]{64})$/;

/**
 * Maps a pod status `containerID` ("containerd://<id>", "cri-o://<id>",
 * "docker://<id>") to the same form as the cgroup side; null for any other
 * runtime or a container that has not started (empty id).
 */
export function containerFromStatusId(containerID: string): ContainerRef | null {
  const match = STATUS_ID.exec(containerID);
  if (!match) return null;
  return { runtime: match[1] as ContainerRuntime, id: (match[2] ?? "").toLowerCase() };
}

/**
 * Reads the container of a process under a proc root ("/proc", or the host's
 * /proc mounted elsewhere). Null when the process is not in a container or is
 * gone (processes exit between a directory scan and the read: not an error).
 */
export function readContainerOf(procRoot: string, pid: number): ContainerRef | null {
  let text: string;
  try {
    // Synchronously, as processTable.ts reads /proc and says why.
    text = readFileSync(join(procRoot, String(pid), "cgroup"), "utf8");
  } catch {
    return null;
  }
  return containerFromCgroupFile(text);
}
