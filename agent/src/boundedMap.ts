// A map that holds at most `capacity` entries: setting one past that forgets
// the oldest (the least recently set), counts it and hands it to `onEvict`.
// Much of what the agent remembers (requests, spans, senders, pids) is named
// by what it watches, i.e. from outside, so every such cache needs a bound,
// and a forgotten entry can change what is reported: each site says what its
// drop is worth, mostly as lostwrite_events_dropped_total{reason="capacity"}.

type OnEvict<K, V> = (key: K, value: V) => void;

export class BoundedMap<K, V> {
  readonly #entries = new Map<K, V>();
  readonly #capacity: number;
  readonly #onEvict: OnEvict<K, V> | undefined;
  #evictions = 0;

  constructor(capacity: number, onEvict?: OnEvict<K, V>) {
    // 0 is allowed, as the correlator's capacities allow it: every entry is then forgotten as it is set, counted.
    if (!Number.isInteger(capacity) || capacity < 0) throw new RangeError(`a bounded map's capacity must be an integer >= 0, not ${capacity}`);
    this.#capacity = capacity;
    this.#onEvict = onEvict;
  }

  get capacity(): number {
    return this.#capacity;
  }

  get size(): number {
    return this.#entries.size;
  }

  /** Entries forgotten for room so far. */
  get evictions(): number {
    return this.#evictions;
  }

  has(key: K): boolean {
    return this.#entries.has(key);
  }

  get(key: K): V | undefined {
    return this.#entries.get(key);
  }

  /**
   * `key` becomes the newest entry (one already there moves to the end), and
   * past capacity the oldest is forgotten: counted, then handed to onEvict.
   */
  set(key: K, value: V): this {
    this.#entries.delete(key);
    this.#entries.set(key, value);
    if (this.#entries.size > this.#capacity) {
      const [oldestKey, oldestValue] = this.#entries.entries().next().value!;
      this.#entries.delete(oldestKey);
      this.#evictions++;
      this.#onEvict?.(oldestKey, oldestValue);
    }
    return this;
  }

  delete(key: K): boolean {
    return this.#entries.delete(key);
  }

  clear(): void {
    this.#entries.clear();
  }

  /** Oldest first. */
  keys(): MapIterator<K> {
    return this.#entries.keys();
  }

  /** Oldest first. */
  values(): MapIterator<V> {
    return this.#entries.values();
  }

  /** Oldest first. */
  entries(): MapIterator<[K, V]> {
    return this.#entries.entries();
  }

  [Symbol.iterator](): MapIterator<[K, V]> {
    return this.#entries.entries();
  }
}

/** The same bound for a set of keys: adding one past capacity forgets the oldest (least recently added). */
export class BoundedSet<K> {
  readonly #map: BoundedMap<K, true>;

  constructor(capacity: number, onEvict?: (key: K) => void) {
    this.#map = new BoundedMap<K, true>(capacity, onEvict && ((key) => onEvict(key)));
  }

  get size(): number {
    return this.#map.size;
  }

  get evictions(): number {
    return this.#map.evictions;
  }

  has(key: K): boolean {
    return this.#map.has(key);
  }

  /** `key` becomes the newest (one already there moves to the end). */
  add(key: K): this {
    this.#map.set(key, true);
    return this;
  }

  delete(key: K): boolean {
    return this.#map.delete(key);
  }

  /** Oldest first. */
  values(): MapIterator<K> {
    return this.#map.keys();
  }
}
