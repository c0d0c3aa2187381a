// Field and label selectors as list and watch requests carry them. Only the
// equality forms (`a=b`, `a==b`, `a!=b`) and, for labels, existence (`k`,
// `!k`) are supported; anything else is refused with 400 rather than
// silently matching everything.
import { ApiError } from "./status.ts";

export interface Requirement {
  key: string;
  op: "=" | "!=" | "exists" | "!exists";
  value: string;
}

export type Selector = Requirement[];

export function parseSelector(kind: "field" | "label", text: string | null): Selector {
  if (!text) return [];
  return text.split(",").map((raw) => raw.trim()).filter((raw) => raw !== "").map((raw) => {
    const match = /^([^=!\s]+)\s*(==|=|!=)\s*([^=!\s]*)$/.exec(raw);
    if (match) {
      const [, key, op, value] = match as unknown as [string, string, string, string];
      return { key, op: op === "!=" ? "!=" : "=", value };
    }
    if (kind === "label" && /^!?[A-Za-z0-9./_-]+$/.test(raw)) {
      return raw.startsWith("!") ? { key: raw.slice(1), op: "!exists", value: "" } : { key: raw, op: "exists", value: "" };
    }
    throw new ApiError(400, `unable to parse requirement ${JSON.stringify(raw)} in ${kind}Selector ${JSON.stringify(text)}: only equality${kind === "label" ? " and existence" : ""} requirements are supported`);
  });
}

/** Reads a dotted field path (`spec.nodeName`) as a string, "" when absent (as Kubernetes does). */
function fieldValue(object: unknown, path: string): string {
  let value: unknown = object;
  for (const part of path.split(".")) {
    value = typeof value === "object" && value !== null ? (value as Record<string, unknown>)[part] : undefined;
  }
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return value === undefined || value === null ? "" : JSON.stringify(value);
}

export function matchesFields(object: unknown, selector: Selector): boolean {
  return selector.every((req) => (fieldValue(object, req.key) === req.value) === (req.op === "="));
}

export function matchesLabels(labels: Record<string, string> | undefined, selector: Selector): boolean {
  return selector.every((req) => {
    const value = labels?.[req.key];
    switch (req.op) {
      case "exists": return value !== undefined;
      case "!exists": return value === undefined;
      case "=": return value === req.value;
      case "!=": return value !== req.value;
    }
  });
}
