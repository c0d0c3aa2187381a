// The two patch formats Kubernetes accepts for custom resources: JSON merge
// patch (RFC 7386) and JSON patch (RFC 6902). Strategic merge patch is refused
// for custom resources by the real apiserver too (415), so it is not here.
import { isDeepStrictEqual } from "node:util";
import { ApiError } from "./status.ts";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

function isObject(value: unknown): value is Record<string, Json> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** RFC 7386: objects merge recursively, null deletes, everything else replaces. */
export function applyMergePatch(target: unknown, patch: unknown): unknown {
  if (!isObject(patch)) return structuredClone(patch);
  const result: Record<string, unknown> = isObject(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete result[key];
    else result[key] = applyMergePatch(result[key], value);
  }
  return result;
}

interface Operation {
  op: string;
  path: string;
  value?: unknown;
  from?: string;
}

function invalid(message: string): ApiError {
  return new ApiError(422, `the server rejected our request due to an error in our request: ${message}`);
}

function parsePointer(pointer: string): string[] {
  if (pointer === "") return [];
  if (!pointer.startsWith("/")) throw invalid(`json patch path ${JSON.stringify(pointer)} does not start with "/"`);
  return pointer.slice(1).split("/").map((token) => token.replaceAll("~1", "/").replaceAll("~0", "~"));
}

function arrayIndex(container: unknown[], token: string, forInsert: boolean, pointer: string): number {
  if (forInsert && token === "-") return container.length;
  if (!/^(0|[1-9][0-9]*)$/.test(token)) throw invalid(`json patch path ${JSON.stringify(pointer)}: bad array index`);
  const index = Number(token);
  if (index > container.length || (!forInsert && index === container.length)) {
    throw invalid(`json patch path ${JSON.stringify(pointer)}: index out of range`);
  }
  return index;
}

/** Returns the parent container and the last token; throws when the parent does not exist. */
function locate(doc: unknown, pointer: string): { parent: unknown; token: string } {
  const tokens = parsePointer(pointer);
  const token = tokens.pop();
  if (token === undefined) throw invalid("json patch on the document root is not supported");
  let parent: unknown = doc;
  for (const part of tokens) {
    if (Array.isArray(parent)) parent = parent[arrayIndex(parent, part, false, pointer)];
    else if (isObject(parent) && part in parent) parent = parent[part];
    else throw invalid(`json patch path ${JSON.stringify(pointer)} does not exist`);
  }
  return { parent, token };
}

function getAt(doc: unknown, pointer: string): unknown {
  const { parent, token } = locate(doc, pointer);
  if (Array.isArray(parent)) return parent[arrayIndex(parent, token, false, pointer)];
  if (isObject(parent) && token in parent) return parent[token];
  throw invalid(`json patch path ${JSON.stringify(pointer)} does not exist`);
}

function removeAt(doc: unknown, pointer: string): unknown {
  const { parent, token } = locate(doc, pointer);
  if (Array.isArray(parent)) return parent.splice(arrayIndex(parent, token, false, pointer), 1)[0];
  if (isObject(parent) && token in parent) {
    const old = parent[token];
    delete parent[token];
    return old;
  }
  throw invalid(`json patch remove: path ${JSON.stringify(pointer)} does not exist`);
}

function addAt(doc: unknown, pointer: string, value: unknown, replace: boolean): void {
  const { parent, token } = locate(doc, pointer);
  if (Array.isArray(parent)) {
    const index = arrayIndex(parent, token, !replace, pointer);
    if (replace) parent[index] = value;
    else parent.splice(index, 0, value);
  } else if (isObject(parent)) {
    if (replace && !(token in parent)) throw invalid(`json patch replace: path ${JSON.stringify(pointer)} does not exist`);
    parent[token] = value as Json;
  } else {
    throw invalid(`json patch path ${JSON.stringify(pointer)}: parent is not a container`);
  }
}

/** RFC 6902, applied atomically to a copy: any failing operation rejects the whole patch. */
export function applyJsonPatch(target: unknown, patch: unknown): unknown {
  if (!Array.isArray(patch)) throw new ApiError(400, "json patch must be a JSON array of operations");
  const doc = structuredClone(target);
  for (const [i, raw] of patch.entries()) {
    if (!isObject(raw) || typeof raw.op !== "string" || typeof raw.path !== "string") {
      throw invalid(`json patch operation ${i} needs string "op" and "path"`);
    }
    const op = raw as unknown as Operation;
    switch (op.op) {
      case "add": addAt(doc, op.path, structuredClone(op.value), false); break;
      case "replace": addAt(doc, op.path, structuredClone(op.value), true); break;
      case "remove": removeAt(doc, op.path); break;
      case "move": addAt(doc, op.path, removeAt(doc, op.from ?? ""), false); break;
      case "copy": addAt(doc, op.path, structuredClone(getAt(doc, op.from ?? "")), false); break;
      case "test":
        if (!isDeepStrictEqual(getAt(doc, op.path), op.value)) {
          throw invalid(`json patch test operation failed at ${JSON.stringify(op.path)}`);
        }
        break;
      default: throw invalid(`json patch operation ${i}: unknown op ${JSON.stringify(op.op)}`);
    }
  }
  return doc;
}
