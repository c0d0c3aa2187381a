// Who sent an OTLP request, from its connection: the process holding the
// client end (connectionSenders.ts, socketOwner.ts), told apart as a target
// (the agent follows it, so its spans can be proven its own), a forwarder the
// configuration names (forwarders.ts), or anything else. senderTrust.ts then
// holds the resource's claims to it.
import type { Socket } from "node:net";
import { readFile, readlink } from "node:fs/promises";
import path from "node:path";
import type { AgentMetrics } from "../../telemetry/metrics.ts";
import { parseNsPids } from "../targets/pidNamespace.ts";
import { ConnectionSenders } from "./connectionSenders.ts";
import { type ForwarderSelector, matchForwarder } from "./forwarders.ts";
import type { SpanProcess } from "./indexedSpans.ts";
import { findSocketOwner, type SocketOwner } from "./socketOwner.ts";
import { type ConnectionSender, describeProcess, type KnownProcess, type PodRef } from "./senderTrust.ts";

/** The target processes now, as the target source knows them. */
export interface TargetView {
  /** The target with this host pid; null when it is none now. */
  target(hostPid: number): KnownProcess | null;
  all(): KnownProcess[];
}

interface SenderIdentityOptions {
  procRoot: string;
  targets: TargetView;
  forwarders: readonly ForwarderSelector[];
  metrics: AgentMetrics;
  /** Kubernetes mode: the pod whose own address this is; null outside it. */
  podAt?: ((address: string) => PodRef | null) | null;
  /** Connections remembered (default 1024). */
  capacity?: number;
  /** Injectable for tests; default findSocketOwner. */
  findOwner?: typeof findSocketOwner;
}

export class SenderIdentity {
  readonly #opts: SenderIdentityOptions;
  readonly #connections: ConnectionSenders;

  constructor(opts: SenderIdentityOptions) {
    this.#opts = opts;
    const findOwner = opts.findOwner ?? findSocketOwner;
    this.#connections = new ConnectionSenders({
      metrics: opts.metrics,
      ...(opts.capacity !== undefined ? { capacity: opts.capacity } : {}),
      lookup: (connection) => findOwner({ procRoot: opts.procRoot, targets: () => opts.targets.all().map((t) => t.hostPid) }, connection),
    });
  }

  /** Kubernetes mode: a target's pod is known, so one outside pods is on the node. */
  get podsKnown(): boolean {
    return this.#opts.podAt != null;
  }

  /** A transport accepted `socket`. */
  track(socket: Socket): void {
    this.#connections.track(socket);
  }

  /** Who is at the client end of the open connection from `address`:`port`. */
  async senderOf(address: string | null, port: number | null): Promise<ConnectionSender> {
    const owner = await this.#connections.ownerOf(address, port);
    const addressPod = address === null ? null : (this.#opts.podAt?.(address) ?? null);
    return this.#classify(owner, address, port, addressPod);
  }

  /** The target a resource's process.pid names (within the pod it names, in Kubernetes mode); null when none. */
  namedTarget(claimed: SpanProcess): KnownProcess | null {
    if (claimed.pid === null) return null;
    for (const target of this.#opts.targets.all()) {
      if (target.nsPid !== claimed.pid) continue;
      if (this.podsKnown && (claimed.podName ?? null) !== target.pod) continue;
      return target;
    }
    return null;
  }

  async #classify(owner: SocketOwner | null, address: string | null, port: number | null, addressPod: PodRef | null): Promise<ConnectionSender> {
    const { targets, forwarders } = this.#opts;
    const pids = owner?.pids ?? [];
    const wantsExe = forwarders.some((f) => f.kind === "exe");
    for (const pid of pids) {
      const target = targets.target(pid);
      const pod = target?.pod ? { namespace: target.namespace ?? "", pod: target.pod } : addressPod;
      const forwarder = matchForwarder(forwarders, { exe: wantsExe ? await readlinkOrNull(path.join(this.#opts.procRoot, String(pid), "exe")) : null, pod });
      if (forwarder !== null) return { kind: "forwarder", name: `${await this.#describePid(pid)} (forwarder ${forwarder.text})` };
    }
    if (pids.length === 0 && addressPod !== null) {
      // A pod's own address with the holder in a namespace the agent does not read: the pod is what is known.
      const forwarder = matchForwarder(forwarders, { exe: null, pod: addressPod });
      if (forwarder !== null) return { kind: "forwarder", name: `pod ${addressPod.namespace}/${addressPod.pod} (forwarder ${forwarder.text})` };
    }
    for (const pid of pids) {
      const target = targets.target(pid);
      if (target !== null) return { kind: "target", process: target };
    }
    const processes = await Promise.all(pids.map(async (hostPid) => ({ hostPid, ...(await this.#nsPidAndComm(hostPid)) })));
    const where = address === null ? "an unknown peer" : `${address}:${port ?? "?"}`;
    const name =
      processes.length > 0
        ? processes.map((p) => describeProcess(p)).join(", ")
        : owner === null
          ? `an unknown process at ${where}`
          : `an unknown process at ${where} (socket:[${owner.inode}], not held by a target${owner.truncated ? "; the scan of other processes stopped at its bound" : ""})`;
    return { kind: "other", processes, name };
  }

  async #describePid(pid: number): Promise<string> {
    const target = this.#opts.targets.target(pid);
    return target !== null ? describeProcess(target) : describeProcess({ hostPid: pid, comm: (await this.#nsPidAndComm(pid)).comm });
  }

  async #nsPidAndComm(pid: number): Promise<{ nsPid: number | null; comm: string }> {
    const dir = path.join(this.#opts.procRoot, String(pid));
    const [status, comm] = await Promise.all([readFile(path.join(dir, "status"), "utf8").catch(() => ""), readFile(path.join(dir, "comm"), "utf8").catch(() => "?")]);
    const nsPids = parseNsPids(status);
    return { nsPid: nsPids?.at(-1) ?? null, comm: comm.replace(/\n$/, "") };
  }
}

async function readlinkOrNull(file: string): Promise<string | null> {
  try {
    return await readlink(file);
  } catch {
    return null;
  }
}
