// The shape the DaemonSet runs the agent in, reproduced without a cluster and
// read from the rendered manifest rather than copied into the tests:
//
//   - its own PID namespace (hostPID: false): `unshare --pid --fork --mount-proc`,
//     so the agent is pid 1 and /proc shows only its own processes;
//   - the container's own /sys, as the runtime gives it: a fresh read-only
//     sysfs, in which /sys/kernel/tracing is an empty directory (tracefs is
//     a mount of its own on the host) and /sys/kernel/btf is the kernel's;
//   - every hostPath volume bind-mounted where the manifest mounts it
//     (read-only where it says so), the host's /proc among them, and every
//     emptyDir as a tmpfs;
//   - a read-only root filesystem (readOnlyRootFilesystem), so the code and
//     the probes are read-only;
//   - the capability bounding set reduced to exactly the manifest's `add`
//     list (drop ALL), no inheritable caps, and no_new_privs
//     (allowPrivilegeEscalation: false), via setpriv.
//
// Everything runs in a private mount namespace: the host's mounts are untouched.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");

/** One volume mount of the agent container, with its volume's source. */
export interface ShapeMount {
  /** The volume's name in the manifest. */
  name: string;
  mountPath: string;
  readOnly: boolean;
  /** The host path of a hostPath volume; null for an emptyDir. */
  hostPath: string | null;
}

export interface DaemonSetShape {
  /** Linux capability names, lower case without CAP_ ("bpf", "perfmon", …). */
  capabilities: string[];
  mounts: ShapeMount[];
  /** Where the host's /proc is mounted in the pod. */
  hostProcMount: string;
  /** The agent's proc root (its --proc-root flag or LOSTWRITE_PROC_ROOT). */
  procRoot: string;
  readOnlyRootFilesystem: boolean;
  allowPrivilegeEscalation: boolean;
  hostPID: boolean;
}

interface Container {
  name: string;
  args?: string[];
  env?: { name: string; value?: string }[];
  securityContext?: {
    capabilities?: { add?: string[]; drop?: string[] };
    readOnlyRootFilesystem?: boolean;
    allowPrivilegeEscalation?: boolean;
  };
  volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
}

interface DaemonSet {
  kind: string;
  spec: {
    template: { spec: { hostPID?: boolean; containers: Container[]; volumes?: { name: string; hostPath?: { path: string }; emptyDir?: object }[] } };
  };
}

/** Renders deploy/base with kubectl's kustomize, as a cluster admin would apply it. */
export function daemonSetShape(kubectl = "/usr/bin/kubectl"): DaemonSetShape {
  const rendered = execFileSync(kubectl, ["kustomize", path.join(repoRoot, "deploy/base")], { encoding: "utf8" });
  const ds = parseAllDocuments(rendered)
    .map((d) => d.toJS() as DaemonSet)
    .find((o) => o?.kind === "DaemonSet");
  if (!ds) throw new Error("deploy/base renders no DaemonSet");
  const pod = ds.spec.template.spec;
  const agent = pod.containers.find((c) => c.name === "agent") ?? pod.containers[0]!;
  const sc = agent.securityContext ?? {};
  if (!sc.capabilities?.drop?.includes("ALL")) throw new Error("the agent container does not drop ALL capabilities");
  const mounts = (agent.volumeMounts ?? []).map((m): ShapeMount => {
    const volume = pod.volumes?.find((v) => v.name === m.name);
    if (!volume?.hostPath && !volume?.emptyDir) throw new Error(`volume ${m.name}: only hostPath and emptyDir volumes are reproduced`);
    return { name: m.name, mountPath: m.mountPath, readOnly: m.readOnly === true, hostPath: volume.hostPath?.path ?? null };
  });
  const hostProcMount = mounts.find((m) => m.hostPath === "/proc")?.mountPath;
  if (!hostProcMount) throw new Error("the DaemonSet mounts no host /proc");
  const procRoot =
    agent.args?.find((a) => a.startsWith("--proc-root="))?.slice("--proc-root=".length) ??
    agent.env?.find((e) => e.name === "LOSTWRITE_PROC_ROOT")?.value ??
    "/proc";
  return {
    capabilities: (sc.capabilities.add ?? []).map((c) => c.toLowerCase().replace(/^cap_/, "")),
    mounts,
    hostProcMount,
    procRoot,
    readOnlyRootFilesystem: sc.readOnlyRootFilesystem === true,
    allowPrivilegeEscalation: sc.allowPrivilegeEscalation !== false,
    hostPID: pod.hostPID === true,
  };
}

const quote = (s: string): string => `'${s.replaceAll("'", `'\\''`)}'`;

/** The shape less one capability or one volume mount (by volume name): what a test drops to see what fails. */
export function shapeWithout(shape: DaemonSetShape, drop: { capability?: string; mount?: string }): DaemonSetShape {
  if (drop.capability && !shape.capabilities.includes(drop.capability)) throw new Error(`the manifest grants no ${drop.capability}`);
  if (drop.mount && !shape.mounts.some((m) => m.name === drop.mount)) throw new Error(`the manifest mounts no volume ${drop.mount}`);
  return {
    ...shape,
    capabilities: shape.capabilities.filter((c) => c !== drop.capability),
    mounts: shape.mounts.filter((m) => m.name !== drop.mount),
  };
}

/**
 * The command that runs `argv` in the pod's shape. Mount set-up happens in a
 * private mount namespace as full root; only then are the capabilities cut
 * and the PID namespace entered, so the agent itself never holds more than
 * the manifest grants.
 */
export function inDeployedShape(argv: string[], shape: DaemonSetShape = daemonSetShape()): string[] {
  const repo = quote(repoRoot);
  const hostPaths = shape.mounts.filter((m) => m.hostPath !== null);
  const emptyDirs = shape.mounts.filter((m) => m.hostPath === null);
  // A checkout below an emptyDir's path (a CI clone under /tmp) would vanish under it.
  const repoHidden = emptyDirs.some((m) => repoRoot.startsWith(`${m.mountPath}/`));
  const setup = [
    "set -e",
    "stage=$(mktemp -d /var/tmp/lostwrite-shape-XXXXXX)",
    // A step that fails leaves no staging directory on the host (never rm -r:
    // the host's own directories are bound below it).
    `trap 'for d in "$stage"/*; do umount -lR "$d" 2>/dev/null || true; rmdir "$d" 2>/dev/null || true; done; rmdir "$stage" 2>/dev/null || true' EXIT`,
    // The host's side of every hostPath volume, staged before /sys is replaced.
    ...hostPaths.flatMap((m, i) => [`mkdir "$stage/v${i}"`, `mount --rbind ${quote(m.hostPath!)} "$stage/v${i}"`]),
    ...(repoHidden ? [`mkdir "$stage/repo"`, `mount --bind ${repo} "$stage/repo"`] : []),
    // The container's /sys: the runtime mounts a sysfs of its own, read-only.
    // Mounted aside and moved: the kernel refuses a sysfs straight onto the
    // host's (the same superblock on the same mount point).
    `mkdir "$stage/sys"`,
    `mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$stage/sys"`,
    `mount --move "$stage/sys" /sys`,
    `rmdir "$stage/sys"`,
    ...emptyDirs.flatMap((m) => [`mkdir -p ${quote(m.mountPath)}`, `mount -t tmpfs -o size=64m tmpfs ${quote(m.mountPath)}`]),
    ...(repoHidden ? [`mkdir -p ${repo}`, `mount --bind "$stage/repo" ${repo}`, `umount -l "$stage/repo"`, `rmdir "$stage/repo"`] : []),
    ...hostPaths.flatMap((m, i) => [
      // A path outside /sys (the host /proc's /host/proc) is created on the host once, empty.
      `mkdir -p ${quote(m.mountPath)}`,
      `mount --rbind "$stage/v${i}" ${quote(m.mountPath)}`,
      ...(m.readOnly ? [`mount -o remount,bind,ro ${quote(m.mountPath)}`] : []),
      `umount -l "$stage/v${i}"`,
      `rmdir "$stage/v${i}"`,
    ]),
    `rmdir "$stage"`,
  ];
  if (shape.readOnlyRootFilesystem) {
    // This mount namespace's view only (a bind remount changes per-mount
    // flags): the root, and the code and probes wherever they are mounted.
    // The code and probes: a mount of their own already when staged above.
    if (!repoHidden) setup.push(`mount --bind ${repo} ${repo}`);
    setup.push("mount -o remount,bind,ro /", `mount -o remount,bind,ro ${repo}`);
  }
  const caps = ["-all", ...shape.capabilities.map((c) => `+${c}`)].join(",");
  const jail = [
    // --kill-child: stopping the wrapper stops the agent, as the kubelet stops the pod.
    "unshare", "--pid", "--fork", "--kill-child=SIGTERM", "--mount-proc",
    "setpriv", "--bounding-set", caps, "--inh-caps", "-all",
    ...(shape.allowPrivilegeEscalation ? [] : ["--no-new-privs"]),
    ...argv,
  ];
  setup.push(`exec ${jail.map(quote).join(" ")}`);
  return ["unshare", "--mount", "--propagation", "private", "sh", "-c", setup.join("\n")];
}

/** Capability names held in a /proc/<pid>/status mask line ("CapBnd:\t00000…"). */
export function capabilityNames(status: string, field: "CapBnd" | "CapEff" | "CapPrm"): string[] {
  const hex = new RegExp(`^${field}:\\s*([0-9a-f]+)$`, "m").exec(status)?.[1];
  if (!hex) throw new Error(`no ${field} line`);
  const mask = BigInt(`0x${hex}`);
  return Object.entries(CAPABILITY_BITS)
    .filter(([, bit]) => (mask >> BigInt(bit)) & 1n)
    .map(([name]) => name)
    .sort();
}

// linux/capability.h
const CAPABILITY_BITS: Record<string, number> = {
  chown: 0, dac_override: 1, dac_read_search: 2, fowner: 3, fsetid: 4, kill: 5, setgid: 6, setuid: 7, setpcap: 8,
  linux_immutable: 9, net_bind_service: 10, net_broadcast: 11, net_admin: 12, net_raw: 13, ipc_lock: 14, ipc_owner: 15,
  sys_module: 16, sys_rawio: 17, sys_chroot: 18, sys_ptrace: 19, sys_pacct: 20, sys_admin: 21, sys_boot: 22, sys_nice: 23,
  sys_resource: 24, sys_time: 25, sys_tty_config: 26, mknod: 27, lease: 28, audit_write: 29, audit_control: 30, setfcap: 31,
  mac_override: 32, mac_admin: 33, syslog: 34, wake_alarm: 35, block_suspend: 36, audit_read: 37, perfmon: 38, bpf: 39,
  checkpoint_restore: 40,
};

/** The host pid of the agent running in the shape: the process whose NSpid has it as pid 1 of a child namespace. */
export function hostPidOfShapedAgent(wrapperPid: number): number | null {
  // unshare --fork's child is the agent (setpriv execs it in place).
  const children = (pid: number): number[] => {
    try {
      return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
    } catch {
      return [];
    }
  };
  const queue = [wrapperPid];
  while (queue.length) {
    const pid = queue.shift()!;
    try {
      const nsPid = /^NSpid:\s*(.*)$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]?.trim().split(/\s+/);
      if (nsPid && nsPid.length === 2 && nsPid[1] === "1") return pid;
    } catch {
      // gone
    }
    queue.push(...children(pid));
  }
  return null;
}
