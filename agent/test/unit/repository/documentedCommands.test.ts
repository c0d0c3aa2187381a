// Every `lostwrite …` command line in the repository's Markdown (README.md,
// docs/*.md and every other *.md) runs through the real `lostwrite` command,
// agent/bin/lostwrite.js (package.json "bin").
//
// Found: in fenced code blocks and inline code, a shell command that is
// `lostwrite ARGS` (first word, or after `--`/`sudo`, as in `kubectl exec …
// -- lostwrite doctor`), `npx lostwrite ARGS`, `npm exec lostwrite -- ARGS`,
// `… agent/src/cli.ts ARGS` (or dist/'s cli.js, or agent/bin/lostwrite.js),
// and `npm run SCRIPT [-- ARGS]` for the package.json scripts that run
// agent/src/cli.ts (run through the bin too: it runs the same cli.ts). A line
// whose word after `lostwrite` is not command-shaped (`lostwrite demo:` in
// captured output) is not a command line. Placeholders (FILE, PID, [URL], …)
// are replaced by real values; an unknown one fails the test. Flags in a
// command table row (first cell `lostwrite CMD`) are attributed to CMD: each
// must exist and take a value exactly when the row gives one. Inline prose
// that only names a command needing an operand (`lostwrite replay` feeds …)
// is checked to name a command, nothing more.
//
// What a pass proves, per command (no root, no bpftrace, no cluster):
// - `--help`, `probe`, `replay FILE`: really run, exit 0 with output.
// - `agent`: its flags and their values are parsed and validated by the real
//   config code, by running them as `probe`, which declares exactly the same
//   options (asserted from both commands' --help); and `agent` itself parses
//   them (below).
// - every command, `agent`, `demo`, `doctor` and `tail` included: commander
//   accepts the command, every flag and every flag's argument, and gets as
//   far as counting operands: the line is run with two extra operands and
//   must fail with "too many arguments" and nothing else, so the action never
//   starts. That does not prove a flag's value is valid where only the action
//   checks it (`demo --duration`, `tail --since`), nor that the command works
//   on a node: the e2e tests do that.
// Also: `npm exec lostwrite` finds the bin, and the bin runs the source in a
// checkout and dist/ in the image layout (no agent/src), through a symlink on
// PATH as deploy/Dockerfile installs it.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { copyFileSync, globSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { repoPath } from "../../repoPath.ts";

const ROOT = repoPath() + "/";
const BIN = path.join(ROOT, "agent/bin/lostwrite.js");
const SENTINELS = ["docs-check-extra-operand-1", "docs-check-extra-operand-2"];

interface Documented {
  where: string;
  text: string;
  args: string[];
  /** Inline code naming a command without its operands (`lostwrite replay` feeds …). */
  mention: boolean;
}

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** The environment without LOSTWRITE_* (they would change what the config sees). */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("LOSTWRITE_")) env[k] = v;
  return { ...env, NO_COLOR: "1", ...extra };
}

function run(file: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { cwd: opts.cwd ?? ROOT, env: opts.env ?? cleanEnv(), timeout: 60_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err && typeof err.code !== "number") reject(new Error(`${file}: ${err.message}`, { cause: err }));
      else resolve({ code: err ? Number(err.code) : 0, stdout, stderr });
    });
  });
}

const runs = new Map<string, Promise<Run>>();
/** The real bin; one run per distinct line (several places document the same one). */
function lostwrite(args: string[]): Promise<Run> {
  const key = JSON.stringify(args);
  let r = runs.get(key);
  if (!r) runs.set(key, (r = run(process.execPath, [BIN, ...args])));
  return r;
}

// ---- Markdown → shell words ------------------------------------------------

/** Shell words of one line, up to a comment; null when its quotes do not close (prose, a diagram). */
function shellWords(line: string): string[][] | null {
  const commands: string[][] = [[]];
  let word: string | null = null;
  const push = (): void => {
    if (word !== null) commands[commands.length - 1]!.push(word);
    word = null;
  };
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (c === "'" || c === '"') {
      const end = line.indexOf(c, i + 1);
      if (end < 0) return null;
      word = (word ?? "") + line.slice(i + 1, end);
      i = end;
    } else if (c === "\\" && i + 1 < line.length) {
      word = (word ?? "") + line[++i];
    } else if (/\s/.test(c)) {
      push();
    } else if (c === "#" && word === null) {
      break;
    } else if (c === "|" || c === ";" || c === "&") {
      push();
      if (line[i + 1] === c) i++;
      commands.push([]);
    } else {
      word = (word ?? "") + c;
    }
  }
  push();
  return commands.filter((c) => c.length > 0);
}

const SCRIPTS = (JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts;

/** The CLI arguments of a shell command, when it runs lostwrite; else null. */
function cliArgs(words: string[]): string[] | null {
  if (words[0] === "npm" && (words[1] === "run" || words[1] === "run-script") && words[2]) {
    const script = shellWords(SCRIPTS[words[2]] ?? "")?.[0] ?? [];
    const base = script[0] === "node" && script[1] === "agent/src/cli.ts" ? script.slice(2) : null;
    const dashes = words.indexOf("--");
    return base && [...base, ...(dashes >= 0 ? words.slice(dashes + 1) : [])];
  }
  if (words[0] === "npm" && words[1] === "exec" && words[2] === "lostwrite") {
    return words[3] === "--" ? words.slice(4) : words.slice(3);
  }
  if (words[0] === "npx" && words[1] === "lostwrite") return words.slice(2);
  for (let i = 0; i < words.length; i++) {
    const w = words[i]!;
    if (/(^|\/)agent\/(src\/cli\.[jt]s|bin\/lostwrite\.js)$/.test(w)) return words.slice(i + 1);
    if (w === "lostwrite" && (i === 0 || words[i - 1] === "--" || words[i - 1] === "sudo")) return words.slice(i + 1);
  }
  return null;
}

/** Command-shaped: `lostwrite demo: testbed …` is captured output, not a command. */
const isCommandLine = (args: string[]): boolean => args.length > 0 && /^(?:[a-z][a-z0-9-]*|-[-a-z]+)$/.test(args[0]!);
/** `lostwrite <command> …`: the syntax of all commands, not one to run. */
const isTemplate = (args: string[]): boolean => args.some((a) => /^<[^>]+>$/.test(a));

function markdownFiles(): string[] {
  return globSync("**/*.md", { cwd: ROOT, exclude: (p) => /(^|\/)(node_modules|dist|\.git)$/.test(p) }).sort();
}

function documentedCommands(): { commands: Documented[]; tableFlags: Map<string, string[][]> } {
  const commands: Documented[] = [];
  // Command table rows: `lostwrite CMD …` in the first cell, `--flag [VALUE]` spans after it.
  const tableFlags = new Map<string, string[][]>();
  const add = (where: string, text: string, inline: boolean): void => {
    for (const words of shellWords(text) ?? []) {
      const args = cliArgs(words);
      if (args && isCommandLine(args) && !isTemplate(args)) commands.push({ where, text: text.trim(), args, mention: inline && args.length === 1 });
    }
  };
  for (const file of markdownFiles()) {
    const lines = readFileSync(path.join(ROOT, file), "utf8").split("\n");
    let fence: string | null = null;
    let paragraph: { start: number; text: string[] } = { start: 0, text: [] };
    const flush = (): void => {
      const text = paragraph.text.join("\n");
      for (const m of text.matchAll(/`([^`]+)`/g)) {
        const line = paragraph.start + (text.slice(0, m.index).match(/\n/g)?.length ?? 0);
        add(`${file}:${line} (inline)`, m[1]!.replaceAll("\n", " "), true);
      }
      paragraph = { start: 0, text: [] };
    };
    lines.forEach((line, i) => {
      const fenceMark = /^\s*(```+|~~~+)/.exec(line)?.[1];
      if (fence !== null) {
        if (fenceMark && fenceMark[0] === fence[0] && fenceMark.length >= fence.length) fence = null;
        else add(`${file}:${i + 1}`, line, false);
        return;
      }
      if (fenceMark) {
        flush();
        fence = fenceMark;
        return;
      }
      if (line.trim() === "") return flush();
      if (paragraph.text.length === 0) paragraph.start = i + 1;
      paragraph.text.push(line);
      const cells = line.startsWith("|") ? line.split("|").slice(1, -1) : [];
      const command = /^\s*`lostwrite ([a-z][a-z0-9-]*)[^`]*`\s*$/.exec(cells[0] ?? "")?.[1];
      if (command) {
        const flags = [...cells.slice(1).join("|").matchAll(/`(--[a-z][^`]*)`/g)].map((m) => shellWords(m[1]!)?.[0] ?? []);
        tableFlags.set(command, [...(tableFlags.get(command) ?? []), ...flags]);
      }
    });
    flush();
  }
  return { commands, tableFlags };
}

// ---- placeholders ------------------------------------------------------------

const SCRATCH = mkdtempSync(path.join(os.tmpdir(), "lostwrite-docs-"));
after(() => rmSync(SCRATCH, { recursive: true, force: true }));
const RECORD_FILE = path.join(SCRATCH, "record.jsonl");
/** Placeholder → value, by the flag before it ("" for an operand). */
const PLACEHOLDERS: Record<string, Record<string, string>> = {
  FILE: { "": "recordings/demo.jsonl", "--record": RECORD_FILE, "--config": "deploy/agent.yaml", "--scenario": "testbed/scenarios/demo.yaml" },
  URL: { "": "ws://127.0.0.1:9470/events", "--otlp-forward": "http://127.0.0.1:4318/v1/traces" },
  PID: { "--target-pid": "1" },
  REGEX: { "--target-comm": "^manager$", "--target-cmdline": "manager" },
  "IP:PORT": { "--apiserver": "10.96.0.1:443" },
  "ADDR:PORT": { "--listen": "127.0.0.1:9470" },
  PATH: { "--binary": "/usr/bin/kubectl" },
};

function substitute(args: string[], where: string): string[] {
  return args.flatMap((arg, i) => {
    if (arg === "…" || arg === "...") return [];
    const optional = /^\[([A-Z][A-Z:_]*)\]$/.exec(arg)?.[1];
    const name = optional ?? (/^[A-Z][A-Z:_]*$/.test(arg) ? arg : null);
    if (name === null) return [arg];
    const before = args[i - 1]?.startsWith("--") ? args[i - 1]! : "";
    const value = PLACEHOLDERS[name]?.[before];
    assert.ok(value !== undefined, `${where}: placeholder ${arg} after "${before}" has no test value: add it to PLACEHOLDERS`);
    return [value];
  });
}

// ---- commander's view of a command ------------------------------------------

interface Help {
  /** Flag → whether it takes a value. */
  options: Map<string, boolean>;
  /** The command has a required operand (`replay <file>`). */
  needsOperand: boolean;
}

const helpCache = new Map<string, Promise<Help>>();
/** `lostwrite CMD --help`, parsed. */
function helpOf(command: string): Promise<Help> {
  let cached = helpCache.get(command);
  if (!cached) {
    cached = lostwrite([command, "--help"]).then((r) => {
      assert.equal(r.code, 0, `lostwrite ${command} --help: ${r.stderr}`);
      // Option lines are indented two spaces; wrapped descriptions far more.
      const options = new Map<string, boolean>();
      for (const m of r.stdout.matchAll(/^ {2}(?:-[a-zA-Z], )?(--[a-z0-9-]+)( [<[])?/gm)) options.set(m[1]!, m[2] !== undefined);
      assert.ok(options.size > 0, `no options in:\n${r.stdout}`);
      const usage = /^Usage: lostwrite (\S+) (.*)$/m.exec(r.stdout);
      assert.equal(usage?.[1], command, `"${command}" is not a lostwrite command:\n${r.stdout}`);
      return { options, needsOperand: /<[^>]+>/.test(usage[2] ?? "") };
    });
    helpCache.set(command, cached);
  }
  return cached;
}

const describeRun = (args: string[], r: Run): string => `lostwrite ${args.join(" ")} → exit ${r.code}\nstdout: ${r.stdout.slice(0, 2000)}\nstderr: ${r.stderr.slice(0, 2000)}`;

/**
 * Commander accepts the command and every flag, then stops at the extra
 * operands. They go right after the command word, so a flag missing its
 * value at the end of the line cannot take one of them as its value.
 */
async function assertParses(args: string[], where: string): Promise<void> {
  const line = [args[0]!, ...SENTINELS, ...args.slice(1)];
  const r = await lostwrite(line);
  const command = args[0]!;
  assert.equal(r.code, 1, `${where}: ${describeRun(line, r)}`);
  assert.match(r.stderr, new RegExp(`^error: too many arguments for '${command}'\\.`, "m"), `${where}: ${describeRun(line, r)}`);
  assert.doesNotMatch(r.stderr, /unknown (option|command)|argument missing|invalid/i, `${where}: ${describeRun(line, r)}`);
}

/** Really runs what needs no root: --help, probe, replay, and agent's flags as probe. */
async function assertRuns(args: string[], where: string): Promise<void> {
  const isHelp = args.includes("--help") || args.includes("-h") || args[0] === "help";
  const command = args[0]!;
  let line: string[] | null = null;
  if (isHelp || command === "probe" || command === "replay") line = args;
  else if (command === "agent") line = ["probe", ...args.slice(1)];
  if (line === null) return;
  const r = await lostwrite(line);
  assert.equal(r.code, 0, `${where}: ${describeRun(line, r)}`);
  assert.doesNotMatch(r.stderr, /^(error|lostwrite):/m, `${where}: ${describeRun(line, r)}`);
  if (isHelp) assert.match(r.stdout, /^Usage: lostwrite/m, `${where}: ${describeRun(line, r)}`);
  else if (command === "replay") assert.match(r.stderr + r.stdout, /loss event\(s\) from/, `${where}: ${describeRun(line, r)}`);
  else assert.match(r.stdout, /^\/\/ Rendered by lostwrite/m, `${where}: ${describeRun(line, r)}`);
}

// ---- tests -------------------------------------------------------------------

const { commands, tableFlags } = documentedCommands();

describe("documented lostwrite commands", () => {
  it("finds the documented command lines (the extraction itself works)", () => {
    const found = new Set(commands.map((c) => c.args[0]));
    for (const command of ["agent", "demo", "replay", "tail", "doctor", "probe"]) assert.ok(found.has(command), `no documented \`lostwrite ${command}\``);
    assert.ok(tableFlags.get("agent")?.some((f) => f[0] === "--target-pid"), "the command table's agent flags");
    // Captured output and the syntax template are not command lines.
    assert.equal(isCommandLine(["demo:", "testbed", "apiserver,"]), false);
    assert.equal(isTemplate(["<command>", "…"]), true);
    assert.deepEqual(shellWords("lostwrite tail --json | jq . # comment"), [["lostwrite", "tail", "--json"], ["jq", "."]]);
    assert.equal(shellWords("inside the operator's trace"), null);
    assert.deepEqual(cliArgs(["kubectl", "-n", "lostwrite", "exec", "ds/lostwrite", "--", "lostwrite", "doctor"]), ["doctor"]);
    assert.deepEqual(cliArgs(["npm", "run", "lostwrite", "--", "tail", "--json"]), ["tail", "--json"]);
    assert.deepEqual(cliArgs(["npm", "run", "demo"]), ["demo"]);
    assert.equal(cliArgs(["npm", "test"]), null);
  });

  it("agent and probe take the same options, so running agent's flags as probe checks them", async () => {
    assert.deepEqual([...(await helpOf("agent")).options].sort(), [...(await helpOf("probe")).options].sort());
  });

  it("a wrong flag or a missing flag argument fails the parse check (the check can fail)", async () => {
    await assert.rejects(assertParses(["doctor", "--no-such-flag"], "self-test"), /unknown option/);
    await assert.rejects(assertParses(["agent", "--listen"], "self-test"), /argument missing/);
    await assert.rejects(assertParses(["no-such-command"], "self-test"));
  });

  // One test per distinct command line, named with every place it is documented.
  const seen = new Map<string, Documented[]>();
  for (const c of commands) {
    const key = c.args.join("\u0000");
    seen.set(key, [...(seen.get(key) ?? []), c]);
  }
  for (const [, places] of seen) {
    const first = places[0]!;
    const where = places.map((p) => p.where).join(", ");
    it(`lostwrite ${first.args.join(" ")} (${where})`, async () => {
      // Prose naming a command that needs an operand: the command exists (its --help runs).
      if (places.every((p) => p.mention) && (await helpOf(first.args[0]!)).needsOperand) return;
      const args = substitute(first.args, where);
      await assertRuns(args, where);
      if (!args.includes("--help") && args[0] !== "help") await assertParses(args, where);
    });
  }

  for (const [command, flags] of tableFlags) {
    if (flags.length === 0) continue;
    it(`README command table: the flags of lostwrite ${command} exist and take what the table says`, async () => {
      const { options } = await helpOf(command);
      const line = [command];
      for (const flag of flags) {
        const [name, ...value] = flag;
        assert.ok(name && options.has(name), `lostwrite ${command} has no ${name}; it has ${[...options.keys()].join(" ")}`);
        const takesValue = options.get(name);
        if (value.length > 0) assert.ok(takesValue, `lostwrite ${command} ${name} takes no value, the table gives "${value.join(" ")}"`);
        // A name-only mention of a flag that takes a value (`--listen`, with its default in prose) is not run.
        if (value.length > 0 || !takesValue) line.push(...substitute(flag, `README command table, ${command}`));
      }
      if (command === "replay") line.push(PLACEHOLDERS.FILE![""]!);
      await assertRuns(line, `README command table, ${command}`);
      await assertParses(line, `README command table, ${command}`);
    });
  }

  it("npm exec lostwrite runs the package.json bin", async (t) => {
    assert.ok(statSync(BIN).mode & 0o100, "agent/bin/lostwrite.js is executable");
    let r: Run;
    try {
      r = await run("npm", ["exec", "--offline", "--", "lostwrite", "--help"]);
    } catch (err) {
      if (process.env.CI === "true") throw err;
      t.skip(`npm not runnable: ${(err as Error).message}`);
      return;
    }
    assert.equal(r.code, 0, describeRun(["(npm exec)", "--help"], r));
    assert.match(r.stdout, /^Usage: lostwrite/m);
  });

  it("the bin runs agent/src/cli.ts in a checkout and dist/ in the image layout, also through a symlink", async () => {
    const dir = path.join(SCRATCH, "image");
    const app = path.join(dir, "app");
    mkdirSync(path.join(app, "agent/bin"), { recursive: true });
    mkdirSync(path.join(app, "dist/agent/src"), { recursive: true });
    mkdirSync(path.join(dir, "usr-local-bin"));
    copyFileSync(BIN, path.join(app, "agent/bin/lostwrite.js"));
    const report = (which: string): string => `console.log(JSON.stringify({ which: ${JSON.stringify(which)}, args: process.argv.slice(2) }));\n`;
    writeFileSync(path.join(app, "dist/agent/src/cli.js"), report("dist"));
    // As deploy/Dockerfile installs it: executable, symlinked onto PATH, run by its shebang.
    const link = path.join(dir, "usr-local-bin/lostwrite");
    symlinkSync(path.join(app, "agent/bin/lostwrite.js"), link);
    const env = cleanEnv({ PATH: `${path.dirname(process.execPath)}${path.delimiter}${process.env.PATH ?? ""}` });
    const image = await run(link, ["agent", "--kubernetes"], { cwd: os.tmpdir(), env });
    assert.equal(image.code, 0, image.stderr);
    assert.deepEqual(JSON.parse(image.stdout), { which: "dist", args: ["agent", "--kubernetes"] });

    mkdirSync(path.join(app, "agent/src"));
    writeFileSync(path.join(app, "agent/src/cli.ts"), `const which: string = "source";\n${report("x").replace('"x"', "which")}`);
    const checkout = await run(link, ["doctor"], { cwd: os.tmpdir(), env });
    assert.equal(checkout.code, 0, checkout.stderr);
    assert.deepEqual(JSON.parse(checkout.stdout), { which: "source", args: ["doctor"] }, "a stale dist/ does not win over the source");
  });
});
