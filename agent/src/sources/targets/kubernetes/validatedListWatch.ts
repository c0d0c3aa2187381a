// List+watch of one resource with @kubernetes/client-node's ListWatch (it
// keeps the resourceVersion, relists on 410 Gone and backs off on
// reconnects), with every object validated before the cache sees it and a
// restart after errors, which ListWatch leaves to its caller.
//
// Why the validation sits inside the watch: ListWatch's watch handler is an
// async function that reads `obj.metadata` unguarded, so one malformed object
// on the stream would become an unhandled rejection, which ends the process.
// Here such an object is reported through `onInvalid` and never reaches it.
import { ListWatch, Watch, type KubeConfig, type KubernetesListObject, type KubernetesObject } from "@kubernetes/client-node";
import type { z } from "zod";

interface ListedObjects {
  items?: unknown[] | null;
  metadata?: { resourceVersion?: string | null } | null;
}

interface ValidatedListWatchOptions<T> {
  kubeConfig: KubeConfig;
  /** Collection path, e.g. "/api/v1/pods". */
  path: string;
  /** The list call for the same collection and selectors. */
  list: () => Promise<ListedObjects>;
  schema: z.ZodType<T>;
  fieldSelector?: string;
  labelSelector?: string;
  /** Objects held at most; new ones past it are dropped and reported. */
  maxObjects: number;
  /** Called after every add, update or delete that reached the cache. */
  onChange: () => void;
  onInvalid: (error: z.ZodError) => void;
  onCapacity: () => void;
  onError: (error: unknown) => void;
  /** First restart delay after an error; doubles up to 30 s. */
  restartDelayMs?: number;
}

const MAX_RESTART_DELAY_MS = 30_000;

export class ValidatedListWatch<T> {
  readonly #opts: ValidatedListWatchOptions<T>;
  readonly #informer: ListWatch<KubernetesObject>;
  #stopped = true;
  #listed = false;
  #restartTimer: NodeJS.Timeout | undefined;
  #restartDelayMs: number;

  constructor(opts: ValidatedListWatchOptions<T>) {
    this.#opts = opts;
    this.#restartDelayMs = opts.restartDelayMs ?? 1000;
    const filter = (phase: string, obj: unknown, deliver: (phase: string, obj: unknown) => void): void =>
      this.#onWatchEvent(phase, obj, deliver);
    // Watch has private members, so the filter is a subclass rather than a wrapper.
    class ValidatingWatch extends Watch {
      override watch(
        path: string,
        queryParams: Record<string, string | number | boolean | undefined>,
        callback: (phase: string, apiObj: unknown, watchObj?: unknown) => void,
        done: (err: unknown) => void,
      ): Promise<AbortController> {
        return super.watch(path, queryParams, (phase, obj) => filter(phase, obj, callback), done);
      }
    }
    this.#informer = new ListWatch<KubernetesObject>(
      opts.path,
      new ValidatingWatch(opts.kubeConfig),
      () => this.#list(),
      false,
      opts.labelSelector,
      opts.fieldSelector,
    );
    const changed = (): void => {
      try {
        opts.onChange();
      } catch (err) {
        opts.onError(err);
      }
    };
    this.#informer.on("add", changed);
    this.#informer.on("update", changed);
    this.#informer.on("delete", changed);
    // A successful (re)connect resets the backoff.
    this.#informer.on("connect", () => {
      this.#restartDelayMs = opts.restartDelayMs ?? 1000;
    });
    this.#informer.on("error", (err: unknown) => {
      opts.onError(err);
      this.#scheduleRestart();
    });
  }

  /** Whether a list has succeeded since start: until then objects() may lack objects that exist. */
  get listed(): boolean {
    return this.#listed;
  }

  /** Lists once and starts watching; resolves after the first list, even if it failed (it is retried). */
  async start(): Promise<void> {
    this.#stopped = false;
    await this.#informer.start();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#restartTimer);
    await this.#informer.stop();
  }

  /** The objects held now, as validated. */
  objects(): T[] {
    return this.#informer.list() as unknown as T[];
  }

  #scheduleRestart(): void {
    if (this.#stopped) return;
    clearTimeout(this.#restartTimer);
    const delay = this.#restartDelayMs;
    this.#restartDelayMs = Math.min(delay * 2, MAX_RESTART_DELAY_MS);
    this.#restartTimer = setTimeout(() => {
      if (this.#stopped) return;
      this.#informer.start().catch((err: unknown) => this.#opts.onError(err));
    }, delay);
    this.#restartTimer.unref();
  }

  #validate(raw: unknown): KubernetesObject | null {
    const parsed = this.#opts.schema.safeParse(raw);
    if (!parsed.success) {
      this.#opts.onInvalid(parsed.error);
      return null;
    }
    return parsed.data as KubernetesObject;
  }

  async #list(): Promise<KubernetesListObject<KubernetesObject>> {
    const listed = await this.#opts.list();
    this.#listed = true;
    const items: KubernetesObject[] = [];
    for (const raw of listed.items ?? []) {
      const item = this.#validate(raw);
      if (item === null) continue;
      if (items.length >= this.#opts.maxObjects) {
        this.#opts.onCapacity();
        continue;
      }
      items.push(item);
    }
    return { items, metadata: { resourceVersion: listed.metadata?.resourceVersion ?? "" } };
  }

  #onWatchEvent(
    phase: string,
    raw: unknown,
    deliver: (phase: string, obj: unknown, watchObj?: unknown) => void,
  ): void {
    let obj: unknown;
    switch (phase) {
      case "ADDED":
      case "MODIFIED":
      case "DELETED": {
        obj = this.#validate(raw);
        if (obj === null) return;
        const meta = (obj as KubernetesObject).metadata;
        const known = this.#informer.get(meta?.name ?? "", meta?.namespace) !== undefined;
        if (phase !== "DELETED" && !known && this.#informer.list().length >= this.#opts.maxObjects) {
          this.#opts.onCapacity();
          return;
        }
        break;
      }
      case "BOOKMARK":
      case "ERROR": {
        // Only the fields ListWatch reads: a Status' code (410 → relist) and a bookmark's resourceVersion.
        const r = typeof raw === "object" && raw !== null ? (raw as Record<string, unknown>) : {};
        const meta = typeof r.metadata === "object" && r.metadata !== null ? (r.metadata as Record<string, unknown>) : {};
        obj = {
          code: typeof r.code === "number" ? r.code : undefined,
          metadata: { resourceVersion: typeof meta.resourceVersion === "string" ? meta.resourceVersion : undefined },
        };
        break;
      }
      default:
        return;
    }
    // ListWatch's handler is async: its rejection must not go unhandled.
    const result: unknown = deliver(phase, obj);
    if (result instanceof Promise) result.catch((err: unknown) => this.#opts.onError(err));
  }
}
