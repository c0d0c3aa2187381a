// Kubernetes label selectors in their string form ("app=x,tier!=db,env in (a,b),!legacy"),
// matched on this side: the pod watch is filtered by node only, because a pod
// may also opt in by annotation, which no server-side selector can express.
// Parsed once at start-up; a bad selector is a config error that quotes itself.

export type Requirement =
  | { op: "=" | "!="; key: string; value: string }
  | { op: "in" | "notin"; key: string; values: string[] }
  | { op: "exists" | "!exists"; key: string };

export type LabelSelector = Requirement[];

// Qualified name with an optional DNS prefix; values may be empty.
const KEY = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/;

/** Splits on commas that are not inside a set "( … )". */
function splitTerms(text: string): string[] {
  const terms: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "(") depth++;
    else if (c === ")") depth--;
    else if (c === "," && depth === 0) {
      terms.push(text.slice(start, i));
      start = i + 1;
    }
  }
  terms.push(text.slice(start));
  return terms.map((t) => t.trim());
}

function checkKey(key: string, selector: string): string {
  if (!KEY.test(key)) throw new Error(`label selector "${selector}": invalid key "${key}"`);
  return key;
}

function checkValue(value: string, selector: string): string {
  if (!VALUE.test(value)) throw new Error(`label selector "${selector}": invalid value "${value}"`);
  return value;
}

/** Parses a selector; "" selects nothing here (an empty selector is "not configured"). */
export function parseLabelSelector(selector: string): LabelSelector {
  if (selector.trim() === "") return [];
  return splitTerms(selector).map((term): Requirement => {
    const set = /^(\S+)\s+(in|notin)\s+\((.*)\)$/.exec(term);
    if (set) {
      const values = (set[3] ?? "").split(",").map((v) => checkValue(v.trim(), selector));
      return { op: set[2] as "in" | "notin", key: checkKey(set[1] ?? "", selector), values };
    }
    const eq = /^([^!=\s]+)\s*(==|=|!=)\s*(.*)$/.exec(term);
    if (eq) {
      const op = eq[2] === "!=" ? "!=" : "=";
      return { op, key: checkKey(eq[1] ?? "", selector), value: checkValue((eq[3] ?? "").trim(), selector) };
    }
    if (term.startsWith("!")) return { op: "!exists", key: checkKey(term.slice(1).trim(), selector) };
    if (term !== "") return { op: "exists", key: checkKey(term, selector) };
    throw new Error(`label selector "${selector}": empty term`);
  });
}

/** True when every requirement holds; an empty selector matches nothing. */
export function matchesLabelSelector(selector: LabelSelector, labels: Record<string, string>): boolean {
  if (selector.length === 0) return false;
  return selector.every((r) => {
    const has = Object.hasOwn(labels, r.key);
    const value = labels[r.key];
    switch (r.op) {
      case "=":
        return has && value === r.value;
      case "!=":
        return !has || value !== r.value;
      case "in":
        return has && r.values.includes(value ?? "");
      case "notin":
        return !has || !r.values.includes(value ?? "");
      case "exists":
        return has;
      case "!exists":
        return !has;
    }
  });
}
