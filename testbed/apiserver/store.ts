// An in-memory object store with etcd's one idea that clients depend on: a
// single, ever-increasing revision stamped as `resourceVersion` on every write,
// and a bounded history of changes so a watch can resume from a revision.
// A watch from a revision older than the history gets 410 Expired, exactly
// what informers handle by re-listing.
import { randomUUID } from "node:crypto";

export interface ObjectMeta {
  name: string;
  namespace: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  [key: string]: unknown;
}

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  [key: string]: unknown;
}

export type WatchEventType = "ADDED" | "MODIFIED" | "DELETED";

export interface StoreEvent {
  type: WatchEventType;
  resource: string;
  revision: number;
  object: KubeObject;
}

type StoreListener = (event: StoreEvent) => void;

export interface StoreOptions {
  /** Changes kept for watches that resume from a revision. */
  historyCapacity?: number;
  /** Concurrent watch subscriptions; more are refused (the HTTP layer answers 429). */
  watcherCapacity?: number;
}

interface StoreStats {
  revision: number;
  objects: number;
  watchers: number;
  historyDropped: number;
  watchersRefused: number;
}

function nsName(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

export class ObjectStore {
  private revision = 1;
  private readonly objects = new Map<string, Map<string, KubeObject>>();
  private readonly history: StoreEvent[] = [];
  private readonly historyCapacity: number;
  private readonly watcherCapacity: number;
  private readonly listeners = new Set<StoreListener>();
  /** Oldest revision a watch may resume from. */
  private compactedRevision = 1;
  private historyDropped = 0;
  private watchersRefused = 0;

  constructor(opts: StoreOptions = {}) {
    this.historyCapacity = opts.historyCapacity ?? 10_000;
    this.watcherCapacity = opts.watcherCapacity ?? 1_000;
  }

  currentRevision(): number {
    return this.revision;
  }

  stats(): StoreStats {
    let objects = 0;
    for (const byName of this.objects.values()) objects += byName.size;
    return { revision: this.revision, objects, watchers: this.listeners.size, historyDropped: this.historyDropped, watchersRefused: this.watchersRefused };
  }

  get(resource: string, namespace: string, name: string): KubeObject | undefined {
    const object = this.objects.get(resource)?.get(nsName(namespace, name));
    return object ? structuredClone(object) : undefined;
  }

  /** Objects of a resource (in one namespace, or all), sorted by namespace/name, with the revision they reflect. */
  list(resource: string, namespace?: string): { items: KubeObject[]; resourceVersion: string } {
    const items = [...(this.objects.get(resource)?.entries() ?? [])]
      .filter(([, object]) => namespace === undefined || object.metadata.namespace === namespace)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([, object]) => structuredClone(object));
    return { items, resourceVersion: String(this.revision) };
  }

  /**
   * Stores `object` under a new revision and tells every watcher. Assigns uid
   * and creationTimestamp when the object is new. Returns the stored copy.
   */
  commit(resource: string, object: KubeObject): KubeObject {
    const byName = this.objects.get(resource) ?? new Map<string, KubeObject>();
    this.objects.set(resource, byName);
    const key = nsName(object.metadata.namespace, object.metadata.name);
    const existed = byName.has(key);
    this.revision += 1;
    const stored = structuredClone(object);
    stored.metadata.uid ??= randomUUID();
    stored.metadata.creationTimestamp ??= new Date().toISOString().replace(/\.\d+Z$/, "Z");
    stored.metadata.resourceVersion = String(this.revision);
    byName.set(key, stored);
    this.publish({ type: existed ? "MODIFIED" : "ADDED", resource, revision: this.revision, object: stored });
    return structuredClone(stored);
  }

  remove(resource: string, namespace: string, name: string): KubeObject | undefined {
    const byName = this.objects.get(resource);
    const current = byName?.get(nsName(namespace, name));
    if (!byName || !current) return undefined;
    byName.delete(nsName(namespace, name));
    this.revision += 1;
    const gone = { ...current, metadata: { ...current.metadata, resourceVersion: String(this.revision) } };
    this.publish({ type: "DELETED", resource, revision: this.revision, object: gone });
    return structuredClone(gone);
  }

  /**
   * Subscribes to changes after `fromRevision` (null: from now). Returns the
   * backlog to replay first, or "expired" when that revision left the history,
   * or "full" when the watcher capacity is reached.
   */
  subscribe(fromRevision: number | null, listener: StoreListener): { backlog: StoreEvent[]; unsubscribe: () => void } | "expired" | "full" {
    if (fromRevision !== null && fromRevision < this.compactedRevision) return "expired";
    if (this.listeners.size >= this.watcherCapacity) {
      this.watchersRefused += 1;
      return "full";
    }
    const backlog = fromRevision === null ? [] : this.history.filter((event) => event.revision > fromRevision);
    this.listeners.add(listener);
    return { backlog, unsubscribe: () => this.listeners.delete(listener) };
  }

  private publish(event: StoreEvent): void {
    this.history.push(event);
    if (this.history.length > this.historyCapacity) {
      const dropped = this.history.shift();
      this.historyDropped += 1;
      if (dropped) this.compactedRevision = dropped.revision;
    }
    for (const listener of this.listeners) listener(event);
  }
}
