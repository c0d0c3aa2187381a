// One schema for flags, environment (LOSTWRITE_*) and the YAML config file.
// Precedence: flags > env > file > defaults, merged in loadConfig(). Unknown
// keys are rejected everywhere, and every error names the key and the value.
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import os from "node:os";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { parseEndpoint } from "./sources/probe/endpointKey.ts";
import { splitHostPort } from "./hostPort.ts";
import { parseForwarder } from "./sources/spans/forwarders.ts";

const hostPort = z.string().refine((value) => splitHostPort(value) !== null, "expected ADDR:PORT");
const regex = z.string().refine((value) => {
  try {
    new RegExp(value);
    return true;
  } catch {
    return false;
  }
}, "not a valid regular expression");
const duration = z
  .union([z.number().nonnegative(), z.string().regex(/^\d+(\.\d+)?(ms|s|m)$/, "expected a duration like 500ms, 10s, 1m")])
  .transform((value) => {
    if (typeof value === "number") return value * 1000;
    const [, amount, unit] = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(value)!;
    return Number(amount) * (unit === "ms" ? 1 : unit === "s" ? 1000 : 60000);
  });
const list = <T extends z.ZodType>(item: T) =>
  z.preprocess((value) => (typeof value === "string" ? value.split(",").filter(Boolean) : value), z.array(item));
const bool = z.preprocess(
  (value) => (value === "true" || value === "1" ? true : value === "false" || value === "0" ? false : value),
  z.boolean(),
);

export const configSchema = z.strictObject({
  "target-pid": list(z.coerce.number().int().positive()).default([]),
  "target-comm": regex.optional(),
  "target-cmdline": regex.optional(),
  kubernetes: bool.default(false),
  "watch-label-selector": z.string().default(""),
  kubeconfig: z.string().min(1).optional(),
  "node-name": z.string().min(1).default(os.hostname()),
  apiserver: list(
    hostPort.refine((value) => {
      try {
        parseEndpoint(value);
        return true;
      } catch {
        return false;
      }
    }, "expected IP:PORT or [IPv6]:PORT"),
  ).default([]),
  listen: hostPort.default("127.0.0.1:9470"),
  "otlp-listen": hostPort.default("127.0.0.1:4318"),
  // "off" turns the gRPC intake off (the HTTP one is what the demo and replay use).
  "otlp-grpc-listen": z.union([z.literal("off"), hostPort]).default("127.0.0.1:4317"),
  "otlp-forward": z.url().optional(),
  // Senders whose span resources are taken as sent (a local Collector): docs/spans.md.
  "otlp-forwarders": list(
    z.string().superRefine((value, ctx) => {
      const parsed = parseForwarder(value);
      if ("error" in parsed) ctx.addIssue({ code: "custom", message: `"${value}": ${parsed.error}` });
    }),
  ).default([]),
  record: z.string().min(1).optional(),
  "correlation-window": duration.default(10000),
  "span-grace": duration.default(60000),
  "probe-variant": z.enum(["auto", "sockets", "syscalls"]).default("auto"),
  // What keeps the socket probe on every send of the node (sendHook.ts): "rules" also a rule
  // that can match a program started later, "targets" only a target on the socket path now.
  "send-hook": z.enum(["rules", "targets"]).default("rules"),
  bpftrace: z.string().min(1).default("bpftrace"),
  "rescan-interval": duration.default(1000),
  "proc-root": z.string().min(1).default("/proc"),
  "unanswered-min-bytes": z.coerce.number().int().nonnegative().default(64),
  "go-probes": bool.default(true),
  "tls-probes": bool.default(true),
});

export type Config = z.output<typeof configSchema>;
export const CONFIG_KEYS = Object.keys(configSchema.shape) as (keyof Config)[];

export class ConfigError extends Error {}

export function envName(key: string): string {
  return `LOSTWRITE_${key.toUpperCase().replaceAll("-", "_")}`;
}

// Kubernetes injects docker-links style variables for every Service with a
// cluster IP in the pod's namespace (pkg/kubelet/envvars), unless the pod spec
// sets enableServiceLinks: false. A Service named lostwrite or lostwrite-<x>
// therefore puts LOSTWRITE_* variables into the agent's environment that name
// no config key: <SVC>_SERVICE_HOST, <SVC>_SERVICE_PORT[_<PORT NAME>],
// <SVC>_PORT and <SVC>_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR], where <SVC> is
// the Service name upper-cased with dashes as underscores. Both the name and
// the value must have that shape; anything else is an unknown variable.
const SVC = "LOSTWRITE(?:_[A-Z0-9_]*[A-Z0-9])?";
const PORT_NAME = "[A-Z0-9]+(?:_[A-Z0-9]+)*";
const PROTO = "TCP|UDP|SCTP";
const PORT = /^\d{1,5}$/;
const isIp = (value: string): boolean => isIP(value) !== 0;
const isLinkUrl = (value: string, proto?: string, port?: string): boolean => {
  const m = /^(tcp|udp|sctp):\/\/(\[[0-9a-fA-F:.]+\]|[^\s[\]]+):(\d{1,5})$/.exec(value);
  if (!m) return false;
  const host = m[2]!.replace(/^\[(.*)\]$/, "$1");
  return isIp(host) && (proto === undefined || m[1] === proto.toLowerCase()) && (port === undefined || m[3] === port);
};
const SERVICE_LINK_PATTERNS: { name: RegExp; value: (value: string, m: RegExpExecArray) => boolean }[] = [
  { name: new RegExp(`^${SVC}_SERVICE_HOST$`), value: isIp },
  { name: new RegExp(`^${SVC}_SERVICE_PORT(?:_${PORT_NAME})?$`), value: (v) => PORT.test(v) },
  { name: new RegExp(`^${SVC}_PORT$`), value: (v) => isLinkUrl(v) },
  { name: new RegExp(`^${SVC}_PORT_(\\d{1,5})_(${PROTO})$`), value: (v, m) => isLinkUrl(v, m[2], m[1]) },
  { name: new RegExp(`^${SVC}_PORT_\\d{1,5}_(${PROTO})_PROTO$`), value: (v, m) => v === m[1]!.toLowerCase() },
  { name: new RegExp(`^${SVC}_PORT_(\\d{1,5})_(?:${PROTO})_PORT$`), value: (v, m) => v === m[1] },
  { name: new RegExp(`^${SVC}_PORT_\\d{1,5}_(?:${PROTO})_ADDR$`), value: isIp },
];

/** Whether NAME=VALUE has the shape of a variable Kubernetes service links inject. */
export function isServiceLinkVariable(name: string, value: string): boolean {
  return SERVICE_LINK_PATTERNS.some(({ name: pattern, value: valid }) => {
    const m = pattern.exec(name);
    return m !== null && valid(value, m);
  });
}

interface EnvConfig {
  /** Config keys and their values. */
  values: Record<string, unknown>;
  /** Variables ignored because Kubernetes service links set them: the caller logs them. */
  serviceLinks: string[];
}

/**
 * LOSTWRITE_* variables. One that names no key is an error, not silently
 * ignored, except one that service links injected, which is returned in
 * `serviceLinks` for the caller to warn about.
 */
export function configFromEnv(env: NodeJS.ProcessEnv): EnvConfig {
  const byName = new Map(CONFIG_KEYS.map((key) => [envName(key), key]));
  const values: Record<string, unknown> = {};
  const serviceLinks: string[] = [];
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith("LOSTWRITE_") || value === undefined) continue;
    if (name === "LOSTWRITE_CONFIG") continue;
    const key = byName.get(name);
    if (key) values[key] = value;
    else if (isServiceLinkVariable(name, value)) serviceLinks.push(name);
    else throw new ConfigError(`environment: unknown variable ${name}="${value}"`);
  }
  return { values, serviceLinks: serviceLinks.sort() };
}

export function configFromFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new ConfigError(`config file "${file}": ${(err as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(`config file "${file}": not YAML: ${(err as Error).message}`);
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== "object" || Array.isArray(doc)) throw new ConfigError(`config file "${file}": expected a mapping of keys`);
  return doc as Record<string, unknown>;
}

/** Merges the sources (later wins) and validates the result against the schema. */
export function loadConfig(sources: { name: string; values: Record<string, unknown> }[]): Config {
  const merged: Record<string, unknown> = {};
  const origin = new Map<string, string>();
  for (const { name, values } of sources) {
    for (const [key, value] of Object.entries(values)) {
      if (value === undefined) continue;
      merged[key] = value;
      origin.set(key, name);
    }
  }
  const result = configSchema.safeParse(merged);
  if (result.success) return result.data;
  const messages = result.error.issues.map((issue) => {
    const key = String(issue.path[0] ?? "");
    if (issue.code === "unrecognized_keys") {
      return issue.keys
        .map((unknown) => `${origin.get(unknown) ?? "config"}: unknown key "${unknown}"=${JSON.stringify(merged[unknown])}`)
        .join("; ");
    }
    return `${origin.get(key) ?? "default"}: key "${key}" value ${JSON.stringify(merged[key])}: ${issue.message}`;
  });
  throw new ConfigError(messages.join("; "));
}
