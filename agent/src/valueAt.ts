// The value at a validation issue's path (zod's issue.path) in the JSON that
// failed, so an error can name the key and the value it found there.

/** `json` followed along `path`; undefined where the path leaves the JSON. */
export function valueAt(json: unknown, path: readonly PropertyKey[]): unknown {
  let value: unknown = json;
  for (const key of path) {
    if (typeof value !== "object" || value === null) return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}
