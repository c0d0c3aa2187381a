// The Kubernetes target source: which processes on this node are operators,
// with their pod identity, and every address the apiserver can have.
//
//   pods on this node (list+watch, fieldSelector=spec.nodeName) ─► watched containers ─┐
//   /proc scan every rescan interval (cgroup → container id) ───────────────────────────┴─► onTargets
//   KUBERNETES_SERVICE_HOST/PORT, kubeconfig server,
//   default/kubernetes EndpointSlices (list+watch) ──────────────────────────────────────► onApiservers
//
// Callbacks fire with the whole current set, only when it changed. Pods that
// go away take their processes with them at the next emission.
import { isIP } from "node:net";
import { join } from "node:path";
import { lookup } from "node:dns/promises";
import type { z } from "zod";
import type { ProcessIdentity } from "../../../model.ts";
import type { AgentMetrics, KUBERNETES_WATCH_ERRORS, KUBERNETES_WATCHED } from "../../../telemetry/metrics.ts";
import type { Logger } from "../../../telemetry/log.ts";
import {
  endpointFromEnv,
  endpointFromServerUrl,
  endpointsFromSlices,
  normaliseEndpoints,
  sameEndpoints,
  type ApiserverEndpoint,
} from "./apiserverEndpoints.ts";
import { parseLabelSelector } from "./labelSelector.ts";
import { describeIssues, EndpointSliceSchema, PodSchema, type EndpointSlice, type Pod } from "./objects.ts";
import { watchedContainers, type SelectionPolicy, type WatchedContainer } from "./podSelection.ts";
import { senderDirectoryOf } from "./podAddresses.ts";
import type { SenderDirectory } from "../../spans/senderTrust.ts";
import { existsSync, readFileSync } from "node:fs";
import { containerFromCgroupFile, podUidFromCgroupFile } from "../cgroup.ts";
import { ContainerProcessScanner } from "./processScan.ts";
import { ValidatedListWatch } from "./validatedListWatch.ts";
import { loadApiAccess, type ApiAccess } from "./apiAccess.ts";
import { KubernetesApi } from "./kubeApi.ts";

export interface KubeTarget {
  pid: number;
  identity: ProcessIdentity;
}

interface KubernetesTargetsOptions {
  /** This node's name (downward API `spec.nodeName`); pods are watched on it only. */
  nodeName: string;
  /** Pods matching it are watched like pods labelled lostwrite.dev/watch=true. Default "" (none). */
  watchLabelSelector?: string;
  /** Path of a kubeconfig file; default: $KUBECONFIG, ~/.kube/config, then the in-cluster service account. */
  kubeconfig?: string;
  /** The apiserver and credentials, ready (tests); wins over `kubeconfig`. */
  access?: ApiAccess;
  /** Where the host's /proc is (the DaemonSet mounts it at /host/proc). Default "/proc". */
  procRoot?: string;
  /** How often /proc is rescanned for processes that started in watched containers. Default 2000 ms. */
  rescanIntervalMs?: number;
  /** Pods held from the watch at most. Default 1024 (kubelet's default maxPods is 110). */
  maxPods?: number;
  /** Processes emitted at most. Default 4096. */
  maxTargets?: number;
  /** Environment to read KUBERNETES_SERVICE_HOST/PORT from. Default process.env. */
  env?: NodeJS.ProcessEnv;
  metrics: AgentMetrics;
  log: Logger;
}

const STAGE = "kubernetes";

interface WatchedIndex {
  byContainer: Map<string, WatchedContainer>;
  byPodUid: Map<string, WatchedContainer[]>;
}

export class KubernetesTargets {
  readonly #opts: KubernetesTargetsOptions;
  readonly #api: KubernetesApi;
  readonly #policy: SelectionPolicy;
  readonly #pods: ValidatedListWatch<Pod>;
  readonly #slices: ValidatedListWatch<EndpointSlice>;
  readonly #scanner: ContainerProcessScanner;
  readonly #targetListeners = new Set<(targets: KubeTarget[]) => void>();
  readonly #apiserverListeners = new Set<(endpoints: ApiserverEndpoint[]) => void>();
  #targets: KubeTarget[] = [];
  /** The watched containers of the pods as listed now, by container id and by pod UID; null when the pods changed. */
  #watched: WatchedIndex | null = null;
  /** Processes admitted at their exec, by pid: alive ones stay targets though no scan matches them yet. */
  readonly #admitted = new Map<number, ProcessIdentity>();
  /** This node's pods by address, for the span intake; null when the pods changed. */
  #senders: SenderDirectory | null = null;
  #targetsKey = "";
  #apiservers: ApiserverEndpoint[] = [];
  #staticApiservers: ApiserverEndpoint[] = [];
  #timer: NodeJS.Timeout | undefined;
  #scanning: Promise<void> | null = null;
  #rescanRequested = false;
  #running = false;

  constructor(opts: KubernetesTargetsOptions) {
    if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(opts.nodeName)) {
      throw new Error(`kubernetes: nodeName "${opts.nodeName}" is not a valid node name (set NODE_NAME from spec.nodeName)`);
    }
    this.#opts = opts;
    this.#policy = { labelSelector: parseLabelSelector(opts.watchLabelSelector ?? "") };
    this.#api = new KubernetesApi(opts.access ?? loadApiAccess(opts.kubeconfig, opts.env));
    this.#scanner = new ContainerProcessScanner({
      procRoot: opts.procRoot ?? "/proc",
      maxProcesses: opts.maxTargets ?? 4096,
      maxRememberedPids: 65_536,
    });
    const fieldSelector = `spec.nodeName=${opts.nodeName}`;
    this.#pods = new ValidatedListWatch<Pod>({
      api: this.#api,
      path: "/api/v1/pods",
      // Never cluster-wide: only this node's pods, the same selector for list and watch.
      fieldSelector,
      schema: PodSchema,
      maxObjects: opts.maxPods ?? 1024,
      onChange: () => {
        this.#watched = null;
        this.#senders = null;
        this.#requestRescan();
      },
      onInvalid: (err) => this.#invalid("Pod", err),
      onCapacity: () => this.#capacity("pods"),
      onError: (err) => this.#watchError("pods", err),
    });
    const sliceSelector = "kubernetes.io/service-name=kubernetes";
    this.#slices = new ValidatedListWatch<EndpointSlice>({
      api: this.#api,
      path: "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
      labelSelector: sliceSelector,
      schema: EndpointSliceSchema,
      maxObjects: 64,
      onChange: () => this.#updateApiservers(),
      onInvalid: (err) => this.#invalid("EndpointSlice", err),
      onCapacity: () => this.#capacity("endpointslices"),
      onError: (err) => this.#watchError("endpointslices", err),
    });
  }

  /** Subscribes to the target set; returns the unsubscribe function. */
  onTargets(cb: (targets: KubeTarget[]) => void): () => void {
    this.#targetListeners.add(cb);
    return () => this.#targetListeners.delete(cb);
  }

  /** Subscribes to the apiserver endpoint set; returns the unsubscribe function. */
  onApiservers(cb: (endpoints: ApiserverEndpoint[]) => void): () => void {
    this.#apiserverListeners.add(cb);
    return () => this.#apiserverListeners.delete(cb);
  }

  /**
   * A process that just exec'd, decided now (the probe traces it meanwhile):
   * its identity when it runs in a watched container, else null. Read
   * synchronously so the probe's next lines from it already have a pod. A
   * container that restarted has a new id the pod status does not name yet;
   * its pod's cgroup is the same, so the pod UID in the cgroup path still
   * says whose it is (and which container, when the pod watches only one).
   */
  admitExec(pid: number, comm: string): ProcessIdentity | null {
    let text: string;
    try {
      text = readFileSync(join(this.#opts.procRoot ?? "/proc", String(pid), "cgroup"), "utf8");
    } catch {
      return null; // gone already
    }
    const containerId = containerFromCgroupFile(text)?.id;
    if (containerId === undefined) return null;
    const { byContainer, byPodUid } = this.#watchedContainers();
    let found = byContainer.get(containerId) ?? null;
    const podUid = found ? null : podUidFromCgroupFile(text);
    const ofPod = podUid === null ? undefined : byPodUid.get(podUid);
    if (ofPod) {
      const names = new Set(ofPod.map((c) => c.container));
      found = { ...ofPod[0]!, containerId, container: names.size === 1 ? ofPod[0]!.container : "" };
    }
    if (!found) return null;
    if (this.#admitted.size >= (this.#opts.maxTargets ?? 4096)) {
      this.#capacity("targets");
      return null;
    }
    const identity: ProcessIdentity = {
      pid,
      tid: pid,
      process: comm,
      namespace: found.namespace,
      pod: found.pod,
      container: found.container,
      controller: found.controller,
    };
    // Kept across scans until the pod status names its container (or it exits).
    this.#admitted.set(pid, identity);
    this.#targets = [...this.#targets.filter((t) => t.pid !== pid), { pid, identity }];
    return identity;
  }

  /**
   * Who is behind an address on this node, from the pods as listed now
   * (every pod of the node, watched or not), for judging span senders.
   */
  senders(): SenderDirectory {
    if (this.#senders?.listed === false && this.#pods.listed) this.#senders = null;
    this.#senders ??= senderDirectoryOf(this.#pods.objects(), this.#pods.listed);
    return this.#senders;
  }

  targets(): KubeTarget[] {
    return this.#targets;
  }

  apiservers(): ApiserverEndpoint[] {
    return this.#apiservers;
  }

  /**
   * Resolves once the first lists were tried and the first /proc scan is
   * done, so a caller can build its first probe with the initial sets.
   * An unreachable apiserver is retried in the background, not fatal here.
   */
  async start(): Promise<void> {
    this.#running = true;
    this.#staticApiservers = await this.#resolveStaticApiservers();
    this.#updateApiservers();
    await Promise.all([this.#pods.start(), this.#slices.start()]);
    await this.#rescan();
    const interval = this.#opts.rescanIntervalMs ?? 2000;
    this.#timer = setInterval(() => this.#requestRescan(), interval);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    this.#running = false;
    clearInterval(this.#timer);
    await Promise.all([this.#pods.stop(), this.#slices.stop()]);
    this.#api.close();
    await this.#scanning;
  }

  #requestRescan(): void {
    if (!this.#running) return;
    if (this.#scanning) {
      // One more scan after the running one, however many were asked for.
      this.#rescanRequested = true;
      return;
    }
    this.#rescan().catch((err: unknown) => this.#opts.log.warnRateLimited("kubernetes-scan", "scanning /proc failed", { error: String(err) }));
  }

  async #rescan(): Promise<void> {
    const run = async (): Promise<void> => {
      do {
        this.#rescanRequested = false;
        await this.#scanOnce();
      } while (this.#rescanRequested && this.#running);
    };
    this.#scanning = run();
    try {
      await this.#scanning;
    } finally {
      this.#scanning = null;
    }
  }

  /** Computed once per change of the pod list: every exec on the node looks its container up here. */
  #watchedContainers(): WatchedIndex {
    if (this.#watched) return this.#watched;
    const byContainer = new Map<string, WatchedContainer>();
    const byPodUid = new Map<string, WatchedContainer[]>();
    for (const pod of this.#pods.objects()) {
      const watched = watchedContainers(pod, this.#policy);
      for (const c of watched) byContainer.set(c.containerId, c);
      if (pod.metadata.uid && watched.length > 0) byPodUid.set(pod.metadata.uid, watched);
    }
    this.#watched = { byContainer, byPodUid };
    return this.#watched;
  }

  async #scanOnce(): Promise<void> {
    const { byContainer } = this.#watchedContainers();
    const { processes, dropped } = await this.#scanner.scan(new Set(byContainer.keys()));
    if (dropped > 0) this.#capacity("targets", dropped);
    const targets: KubeTarget[] = [];
    const scanned = new Set(processes.map((p) => p.pid));
    const watchedPods = new Set([...byContainer.values()].map((c) => `${c.namespace}/${c.pod}`));
    for (const [pid, identity] of this.#admitted) {
      if (scanned.has(pid)) this.#admitted.delete(pid); // the pod status names its container now
      else if (!watchedPods.has(`${identity.namespace}/${identity.pod}`)) this.#admitted.delete(pid);
      else if (!existsSync(join(this.#opts.procRoot ?? "/proc", String(pid)))) this.#admitted.delete(pid);
      else targets.push({ pid, identity });
    }
    for (const p of processes) {
      const c = byContainer.get(p.containerId);
      if (!c) continue;
      targets.push({
        pid: p.pid,
        identity: {
          pid: p.pid,
          tid: p.pid,
          process: p.comm,
          namespace: c.namespace,
          pod: c.pod,
          container: c.container,
          controller: c.controller,
        },
      });
    }
    const key = JSON.stringify(targets);
    if (key === this.#targetsKey) return;
    this.#targetsKey = key;
    this.#targets = targets;
    this.#opts.metrics.targets.set({ source: "kubernetes" }, targets.length);
    for (const cb of this.#targetListeners) cb(targets);
  }

  #updateApiservers(): void {
    const next = normaliseEndpoints([...this.#staticApiservers, ...endpointsFromSlices(this.#slices.objects())]);
    if (sameEndpoints(next, this.#apiservers)) return;
    this.#apiservers = next;
    for (const cb of this.#apiserverListeners) cb(next);
  }

  /** The Service address from the environment and the kubeconfig server, names resolved to addresses. */
  async #resolveStaticApiservers(): Promise<ApiserverEndpoint[]> {
    const found: ApiserverEndpoint[] = [];
    const fromEnv = endpointFromEnv(this.#opts.env ?? process.env);
    if (fromEnv) found.push(fromEnv);
    const fromConfig = endpointFromServerUrl(this.#api.server);
    if (fromConfig) found.push(fromConfig);
    const out: ApiserverEndpoint[] = [];
    for (const e of found) {
      if (isIP(e.host) !== 0) {
        out.push(e);
        continue;
      }
      // A socket's peer is an address, never a name.
      try {
        for (const a of await lookup(e.host, { all: true })) out.push({ host: a.address, port: e.port });
      } catch (err) {
        this.#opts.log.warn("cannot resolve the apiserver host", { host: e.host, error: String(err) });
      }
    }
    return out;
  }

  #invalid(kind: string, err: z.ZodError): void {
    this.#opts.metrics.eventsDropped.inc({ stage: STAGE, reason: "invalid" });
    this.#opts.log.warnRateLimited(`kubernetes-invalid-${kind}`, `skipped a malformed ${kind}`, {
      issues: describeIssues(err),
    });
  }

  #capacity(what: string, n = 1): void {
    this.#opts.metrics.eventsDropped.inc({ stage: STAGE, reason: "capacity" }, n);
    this.#opts.log.warnRateLimited(`kubernetes-capacity-${what}`, `kubernetes ${what} at capacity; dropping`, {});
  }

  #watchError(what: (typeof KUBERNETES_WATCHED)[number], err: unknown): void {
    const reason = watchErrorReason(err);
    // Counted, not only logged: a ClusterRole that lacks a verb leaves the
    // agent blind to new pods, and on-call reads the dashboard, not the log.
    this.#opts.metrics.kubernetesWatchErrors.inc({ resource: what, reason });
    this.#opts.log.warnRateLimited(`kubernetes-watch-${what}`, `watching ${what} failed; retrying`, {
      reason,
      error: err instanceof Error ? err.message : String(err),
    });
  }
}

/** Why a list or watch failed, from the client's error: its HTTP status where it has one, else its message. */
export function watchErrorReason(err: unknown): (typeof KUBERNETES_WATCH_ERRORS)[number] {
  const { code, statusCode } = (typeof err === "object" && err !== null ? err : {}) as { code?: unknown; statusCode?: unknown };
  const status = typeof code === "number" ? code : typeof statusCode === "number" ? statusCode : null;
  const text = err instanceof Error ? err.message : String(err);
  if (status === 403 || (status === null && /\bforbidden\b/i.test(text))) return "forbidden";
  if (status === 401 || (status === null && /\bunauthori[sz]ed\b/i.test(text))) return "unauthorized";
  return "other";
}
