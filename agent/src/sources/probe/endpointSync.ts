// The apiserver endpoints the kernel filters on: the configured ones plus,
// in Kubernetes, the discovered ones (Service ClusterIP and EndpointSlice
// addresses), followed live. Each change reaches the kernel as one
// endpoint added or removed.
import type { Logger } from "../../telemetry/log.ts";
import { formatHostPort } from "../../hostPort.ts";
import { endpointKey, type EndpointKey } from "./endpointKey.ts";

type EndpointChange = (key: EndpointKey, present: boolean) => Promise<void>;

export class EndpointSync {
  private readonly configured: readonly EndpointKey[];
  private readonly log: Logger;
  private endpoints: EndpointKey[];
  private listener: EndpointChange = () => Promise.resolve();

  constructor(configured: readonly EndpointKey[], log: Logger) {
    this.configured = configured;
    this.endpoints = [...configured];
    this.log = log;
  }

  current(): EndpointKey[] {
    return this.endpoints;
  }

  /** Whether host:port is one of the endpoints now. */
  has(host: string, port: number): boolean {
    const text = formatHostPort(host, port);
    return this.endpoints.some((e) => e.text === text);
  }

  /** Who applies a change in the kernel; set once, before the first follow(). */
  onChange(listener: EndpointChange): void {
    this.listener = listener;
  }

  /** Makes the set the configured endpoints plus `discovered`, applying the difference. */
  async follow(discovered: readonly { host: string; port: number }[]): Promise<void> {
    const next = new Map(this.configured.map((e) => [e.text, e]));
    for (const { host, port } of discovered) {
      try {
        const key = endpointKey(host, port);
        next.set(key.text, key);
      } catch (err) {
        // The kernel sees addresses, not names: a hostname endpoint cannot be filtered on.
        this.log.warnRateLimited(`endpoint:${host}`, "apiserver endpoint is not an IP address; ignored", { host, port, error: String(err) });
      }
    }
    const before = new Map(this.endpoints.map((e) => [e.text, e]));
    this.endpoints = [...next.values()];
    for (const [text, key] of next) if (!before.has(text)) await this.listener(key, true);
    for (const [text, key] of before) if (!next.has(text)) await this.listener(key, false);
    this.log.info("apiserver endpoints", { endpoints: this.endpoints.map((e) => e.text) });
  }
}
