// One schema for flags, environment (LOSTWRITE_*) and the YAML config file.
// Precedence: flags > env > file > defaults, merged in loadConfig(). Unknown
// keys are rejected everywhere, and every error names the key and the value.
import { readFileSync } from "node:fs";
import os from "node:os";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { parseEndpoint } from "./sources/probe/endpointKey.ts";

const hostPort = z.string().regex(/^(\[[0-9a-fA-F:.]+\]|[^:[\]\s]+):\d{1,5}$/, "expected ADDR:PORT");
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
  "otlp-forward": z.url().optional(),
  record: z.string().min(1).optional(),
  "correlation-window": duration.default(10000),
  "probe-variant": z.enum(["auto", "sockets", "syscalls"]).default("auto"),
  bpftrace: z.string().min(1).default("bpftrace"),
  "rescan-interval": duration.default(1000),
  "proc-root": z.string().min(1).default("/proc"),
  "unanswered-min-bytes": z.coerce.number().int().nonnegative().default(64),
});

export type Config = z.output<typeof configSchema>;
export const CONFIG_KEYS = Object.keys(configSchema.shape) as (keyof Config)[];

export class ConfigError extends Error {}

export function envName(key: string): string {
  return `LOSTWRITE_${key.toUpperCase().replaceAll("-", "_")}`;
}

/** LOSTWRITE_* variables; one that names no key is an error, not silently ignored. */
export function configFromEnv(env: NodeJS.ProcessEnv): Record<string, unknown> {
  const byName = new Map(CONFIG_KEYS.map((key) => [envName(key), key]));
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith("LOSTWRITE_") || value === undefined) continue;
    if (name === "LOSTWRITE_CONFIG") continue;
    const key = byName.get(name);
    if (!key) throw new ConfigError(`environment: unknown variable ${name}="${value}"`);
    out[key] = value;
  }
  return out;
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
