// The fault rule language, shared by the control API (JSON) and scenario
// files (YAML). A rule says which requests it matches (method, path glob,
// skip, count), what it does to them, and optionally what a detector is
// expected to report for it, so a demo can compare expected with detected.
import { readFile } from "node:fs/promises";
import { parse } from "yaml";
import { z } from "zod";
import type { LossCause, Noticed } from "../../agent/src/model.ts";

const LOSS_CAUSES = [
  "write_failed", "zero_byte_write", "connect_failed", "connection_reset", "connection_closed_unanswered", "http_rejected",
] as const satisfies readonly LossCause[];
const NOTICED = ["yes", "no", "unknown"] as const satisfies readonly Noticed[];

/** Milliseconds as a number or a string with a unit: 250, "250ms", "2s", "1m". */
const duration = z.union([
  z.number().int().nonnegative(),
  z.string().regex(/^\d+(\.\d+)?(ms|s|m)$/, "expected a duration like 250ms, 2s or 1m").transform((text) => {
    const value = Number.parseFloat(text);
    return Math.round(text.endsWith("ms") ? value : text.endsWith("s") ? value * 1000 : value * 60_000);
  }),
]);

const expectation = z.strictObject({
  cause: z.enum(LOSS_CAUSES).optional(),
  noticed: z.enum(NOTICED).optional(),
  /** Free text for humans reading a demo summary. */
  note: z.string().optional(),
});

const matchFields = {
  id: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/).optional(),
  /** HTTP method, case-insensitive; omitted or "*" matches any. */
  method: z.string().regex(/^(\*|[A-Za-z]+)$/).optional(),
  /** Glob on the URL path (no query): `*` matches any run of characters including "/", `?` one character. */
  path: z.string().min(1).default("*"),
  /** Let this many matching requests through first. */
  skip: z.number().int().nonnegative().default(0),
  /** How many requests to fault; "always" never runs out. */
  count: z.union([z.number().int().positive(), z.literal("always")]).default(1),
  /** Arm the rule this long after it is loaded (scenario timeline). */
  at: duration.default(0),
  expect: expectation.optional(),
};

export const ruleSchema = z.discriminatedUnion("action", [
  /** RST the connection once `afterBytes` bytes of the request body were read (0: on the request headers). */
  z.strictObject({ ...matchFields, action: z.literal("reset"), afterBytes: z.number().int().nonnegative().default(0) }),
  /** Read the whole request, then close the connection (FIN) without answering. */
  z.strictObject({ ...matchFields, action: z.literal("close") }),
  /** Close the listening socket for `for` so connects are refused; `existing` says what happens to open connections. */
  z.strictObject({
    ...matchFields, action: z.literal("refuse"), for: duration,
    existing: z.enum(["keep", "close", "reset"]).default("keep"),
  }),
  /** Answer with this HTTP status and a Kubernetes Status body. */
  z.strictObject({
    ...matchFields, action: z.literal("status"), code: z.number().int().min(400).max(599),
    message: z.string().optional(), retryAfterSeconds: z.number().int().positive().optional(),
  }),
  /** Hold the answer for `for`, then answer normally. */
  z.strictObject({ ...matchFields, action: z.literal("delay"), for: duration }),
  /**
   * HTTP/2: send GOAWAY whose last stream id is below this request's, then
   * refuse the stream: the server never processed it, and the client sends it
   * again on a new connection. HTTP/1.1 has no GOAWAY: the connection is closed.
   */
  z.strictObject({ ...matchFields, action: z.literal("goaway") }),
  /**
   * HTTP/2: read the request, then end its stream alone with RST_STREAM
   * (INTERNAL_ERROR unless `code` says otherwise): the connection and its
   * other streams live on. HTTP/1.1 has no streams: the connection is reset.
   */
  z.strictObject({ ...matchFields, action: z.literal("rst_stream"), code: z.number().int().nonnegative().default(2) }),
  /** Stop reading from the connection for `for` (omitted: until the client gives up), then carry on normally. */
  z.strictObject({ ...matchFields, action: z.literal("stall"), for: duration.optional() }),
]);

export type RuleInput = z.input<typeof ruleSchema>;
export type Rule = z.output<typeof ruleSchema>;
export type FaultActionType = Rule["action"];
export type Expectation = z.output<typeof expectation>;

export const scenarioSchema = z.strictObject({
  /** Shown by tools that run the scenario. */
  description: z.string().optional(),
  rules: z.array(ruleSchema).default([]),
});

export type Scenario = z.output<typeof scenarioSchema>;

/** "rules.2.code: Invalid input: expected number, received string (got "409")". */
export function describeIssues(error: z.ZodError, input: unknown): string {
  return error.issues.map((issue) => {
    let value: unknown = input;
    for (const key of issue.path) value = typeof value === "object" && value !== null ? (value as Record<PropertyKey, unknown>)[key] : undefined;
    const where = issue.path.length > 0 ? issue.path.join(".") : "(top level)";
    const got = issue.code === "unrecognized_keys" ? ` (keys ${issue.keys.map((key) => JSON.stringify(key)).join(", ")})` : value === undefined ? "" : ` (got ${JSON.stringify(value)})`;
    return `${where}: ${issue.message}${got}`;
  }).join("; ");
}

export function parseRule(input: unknown): Rule {
  const result = ruleSchema.safeParse(input);
  if (!result.success) throw new Error(`invalid fault rule: ${describeIssues(result.error, input)}`);
  return result.data;
}

export function parseScenario(text: string, source = "scenario"): Scenario {
  let input: unknown;
  try {
    input = parse(text);
  } catch (error) {
    throw new Error(`${source}: not valid YAML: ${(error as Error).message}`, { cause: error });
  }
  const result = scenarioSchema.safeParse(input ?? {});
  if (!result.success) throw new Error(`${source}: ${describeIssues(result.error, input)}`);
  return result.data;
}

export async function loadScenario(filePath: string): Promise<Scenario> {
  return parseScenario(await readFile(filePath, "utf8"), filePath);
}
