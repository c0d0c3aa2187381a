// List+watch of one resource, as an informer does it: list, then watch from
// the list's resourceVersion, keep the objects by namespace/name, watch again
// from the last resourceVersion seen when the server ends a watch, list
// again when it says that version is gone (410), and after an error list
// again with a backoff doubling up to 30 s.
//
// Every object is validated before the cache sees it: one malformed object is
// reported through `onInvalid` and skipped, never allowed to throw into the
// watch. The cache holds at most maxObjects; objects past it are reported
// through `onCapacity` and dropped.
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import { KubernetesApiError, type KubernetesApi } from "./kubeApi.ts";

interface NamespacedObject {
  metadata: { name: string; namespace: string };
}

interface ValidatedListWatchOptions<T> {
  api: KubernetesApi;
  /** Collection path, e.g. "/api/v1/pods". */
  path: string;
  schema: z.ZodType<T>;
  fieldSelector?: string;
  labelSelector?: string;
  /** Objects held at most; new ones past it are dropped and reported. */
  maxObjects: number;
  /** Called after every list and every add, update or delete that reached the cache. */
  onChange: () => void;
  onInvalid: (error: z.ZodError) => void;
  onCapacity: () => void;
  onError: (error: unknown) => void;
  /** First restart delay after an error; doubles up to 30 s. */
  restartDelayMs?: number;
}

const MAX_RESTART_DELAY_MS = 30_000;
/** The server ends a watch after a time drawn in this range, as client-go asks (5 to 10 minutes). */
const WATCH_TIMEOUT_S = [300, 600] as const;
/** A watch the server has not ended this long after its timeout is given up: its connection is dead. */
const WATCH_GRACE_MS = 30_000;

/** Only the fields read of a list's envelope: its items are validated one by one. */
const ListSchema = z.object({
  items: z.array(z.unknown()).nullish(),
  metadata: z.object({ resourceVersion: z.string().nullish() }).nullish(),
});

/** A watch event's envelope; its object is validated by what the event is. */
const EventSchema = z.object({ type: z.string(), object: z.unknown() });

/** What a BOOKMARK and an ERROR event carry that is read. */
const VersionOnlySchema = z.object({ metadata: z.object({ resourceVersion: z.string().nullish() }).nullish() }).loose();
const StatusSchema = z.object({ code: z.number().nullish(), message: z.string().nullish() }).loose();

/** The server said the resourceVersion watched from is gone: list again. */
class Expired extends Error {}

export class ValidatedListWatch<T extends NamespacedObject> {
  readonly #opts: ValidatedListWatchOptions<T>;
  readonly #objects = new Map<string, T>();
  #resourceVersion = "";
  #listed = false;
  #abort: AbortController | null = null;
  #running: Promise<void> | null = null;

  constructor(opts: ValidatedListWatchOptions<T>) {
    this.#opts = opts;
  }

  /** Whether a list has succeeded since start: until then objects() may lack objects that exist. */
  get listed(): boolean {
    return this.#listed;
  }

  /** The objects held now, as validated. */
  objects(): T[] {
    return [...this.#objects.values()];
  }

  /**
   * Lists and goes on watching; resolves once the first list and watch were
   * answered (no change after it is missed), or one failed (it is retried).
   */
  async start(): Promise<void> {
    if (this.#running !== null) return;
    const abort = new AbortController();
    this.#abort = abort;
    let firstTried!: () => void;
    const tried = new Promise<void>((resolve) => (firstTried = resolve));
    this.#running = this.#run(abort.signal, firstTried);
    await tried;
  }

  async stop(): Promise<void> {
    this.#abort?.abort();
    await this.#running;
    this.#running = null;
  }

  async #run(signal: AbortSignal, firstTried: () => void): Promise<void> {
    const initialDelay = this.#opts.restartDelayMs ?? 1000;
    let delay = initialDelay;
    while (!signal.aborted) {
      try {
        await this.#list(signal);
        for (;;) {
          await this.#watch(signal, () => {
            delay = initialDelay;
            firstTried();
          });
          if (signal.aborted) return;
        }
      } catch (err) {
        firstTried();
        if (signal.aborted) return;
        // The version is gone: said in the stream, or as the watch's HTTP status.
        if (err instanceof Expired || (err instanceof KubernetesApiError && err.statusCode === 410)) continue;
        this.#opts.onError(err);
        try {
          await sleep(delay, undefined, { signal });
        } catch {
          return; // stopped while waiting
        }
        delay = Math.min(delay * 2, MAX_RESTART_DELAY_MS);
      }
    }
  }

  #selectors(): Record<string, string | undefined> {
    return { fieldSelector: this.#opts.fieldSelector, labelSelector: this.#opts.labelSelector };
  }

  async #list(signal: AbortSignal): Promise<void> {
    const listed = ListSchema.safeParse(await this.#opts.api.get(this.#opts.path, this.#selectors(), signal));
    if (!listed.success) throw new KubernetesApiError(`GET ${this.#opts.path}: not a list: ${listed.error.issues[0]?.message ?? ""}`, 200);
    this.#objects.clear();
    for (const raw of listed.data.items ?? []) {
      const item = this.#validate(raw);
      if (item === null) continue;
      if (this.#objects.size >= this.#opts.maxObjects) {
        this.#opts.onCapacity();
        continue;
      }
      this.#objects.set(keyOf(item), item);
    }
    this.#resourceVersion = listed.data.metadata?.resourceVersion ?? "";
    this.#listed = true;
    this.#changed();
  }

  /** One watch, until the server ends it; `answered` is called once the server accepted it. */
  async #watch(signal: AbortSignal, answered: () => void): Promise<void> {
    const [low, high] = WATCH_TIMEOUT_S;
    const timeoutS = low + Math.floor(Math.random() * (high - low));
    // Bounds a watch whose connection died without a word from either side.
    const watchSignal = AbortSignal.any([signal, AbortSignal.timeout(timeoutS * 1000 + WATCH_GRACE_MS)]);
    const query = {
      ...this.#selectors(),
      resourceVersion: this.#resourceVersion,
      allowWatchBookmarks: "true",
      timeoutSeconds: String(timeoutS),
    };
    const started = Date.now();
    let events = 0;
    await this.#opts.api.watch(this.#opts.path, query, watchSignal, answered, (event) => {
      events++;
      this.#onEvent(event);
    });
    // A server that ends every watch at once would otherwise be asked again and again without a pause.
    if (events === 0 && Date.now() - started < 1000) throw new KubernetesApiError(`watch ${this.#opts.path}: ended at once`, 200);
  }

  #onEvent(raw: unknown): void {
    const event = EventSchema.safeParse(raw);
    if (!event.success) throw new KubernetesApiError(`watch ${this.#opts.path}: not an event: ${JSON.stringify(raw).slice(0, 80)}`, 200);
    const { type, object } = event.data;
    switch (type) {
      case "ADDED":
      case "MODIFIED":
      case "DELETED": {
        this.#seenVersion(object);
        const obj = this.#validate(object);
        if (obj === null) return;
        const key = keyOf(obj);
        if (type === "DELETED") this.#objects.delete(key);
        else if (!this.#objects.has(key) && this.#objects.size >= this.#opts.maxObjects) {
          this.#opts.onCapacity();
          return;
        } else this.#objects.set(key, obj);
        this.#changed();
        return;
      }
      case "BOOKMARK":
        this.#seenVersion(object);
        return;
      case "ERROR": {
        const status = StatusSchema.safeParse(object);
        const code = status.success ? (status.data.code ?? null) : null;
        if (code === 410) throw new Expired();
        const message = status.success ? (status.data.message ?? "") : "";
        throw new KubernetesApiError(`watch ${this.#opts.path}: ${code ?? "error"} ${message}`.trim(), code);
      }
      default:
        return;
    }
  }

  /** The resourceVersion to watch from next, from any object that carries one, valid or not. */
  #seenVersion(object: unknown): void {
    const parsed = VersionOnlySchema.safeParse(object);
    const version = parsed.success ? parsed.data.metadata?.resourceVersion : undefined;
    if (version) this.#resourceVersion = version;
  }

  #validate(raw: unknown): T | null {
    const parsed = this.#opts.schema.safeParse(raw);
    if (!parsed.success) {
      this.#opts.onInvalid(parsed.error);
      return null;
    }
    return parsed.data;
  }

  #changed(): void {
    try {
      this.#opts.onChange();
    } catch (err) {
      this.#opts.onError(err);
    }
  }
}

function keyOf(obj: NamespacedObject): string {
  return `${obj.metadata.namespace}/${obj.metadata.name}`;
}
