// Runs test files one at a time (what --test-concurrency=1 did for the e2e
// files), each in its own `node --test` process with a wall-clock limit, so a
// test file that never ends (a handle Node cannot close at exit, a leftover
// timer, a stuck child) fails fast and by name instead of holding CI until its
// budget runs out.
//
//   node scripts/runTests.ts [--timeout=SECONDS] [--grace=SECONDS] [--test-*...] <glob|file>...
//
// Each file runs as `node --test <--test-* options> <file>` in a process group
// of its own, with the output streamed as it comes. When a file is still
// running after --timeout seconds (default 600; the environment variable
// LOSTWRITE_TEST_TIMEOUT, in seconds, overrides it), the runner prints
// "TIMEOUT: <file> after N s", sends SIGTERM to the whole group (so node's
// test runner reports what was still running), and SIGKILL after --grace
// seconds (default 5) to whatever is left of it. The exit status is 0 only
// when every file passed.
import { spawn } from "node:child_process";
import { globSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

export interface RunOptions {
  files: string[];
  /** Wall-clock limit per file, in seconds. */
  timeoutS: number;
  /** From SIGTERM to SIGKILL of a timed-out file's process group, in seconds. */
  graceS: number;
  /** Options for each `node --test` (e.g. --test-reporter=spec). */
  testArgs: string[];
  /** Where the runner's own lines go (default stderr). */
  log?: (line: string) => void;
  /** Gets the files' stdout and stderr; without it they are inherited, so they stream as they come. */
  output?: (chunk: string) => void;
}

export type Outcome = "passed" | "failed" | "timeout";

export interface FileResult {
  file: string;
  outcome: Outcome;
  code: number | null;
  signal: NodeJS.Signals | null;
  seconds: number;
}

/** Sends `signal` to process group `pgid`; false once the group is empty. */
function signalGroup(pgid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}

let running: { pgid: number; stop: () => void } | undefined;

async function runFile(file: string, opts: RunOptions): Promise<FileResult> {
  const log = opts.log ?? ((line: string) => console.error(line));
  const started = performance.now();
  // detached: the file gets a process group (a session) of its own, so it and
  // everything it started can be signalled at once. NODE_TEST_CONTEXT (set when
  // this runs inside a test) would make `node --test` skip the file.
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const child = spawn(process.execPath, ["--test", ...opts.testArgs, file], {
    stdio: ["ignore", opts.output ? "pipe" : "inherit", opts.output ? "pipe" : "inherit"],
    detached: true,
    env,
  });
  for (const stream of [child.stdout, child.stderr]) stream?.setEncoding("utf8").on("data", (chunk: string) => opts.output?.(chunk));
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => {
    child.once("exit", (code, signal) => resolve([code, signal]));
    child.once("error", (error) => {
      log(`runTests: cannot start ${file}: ${error.message}`);
      resolve([null, null]);
    });
  });
  let timedOut = false;
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopping ??= (async () => {
      const pgid = child.pid;
      if (pgid === undefined) return;
      const until = async (ms: number): Promise<void> => {
        const deadline = performance.now() + ms;
        while (performance.now() < deadline && signalGroup(pgid, 0)) await sleep(50);
      };
      signalGroup(pgid, "SIGTERM");
      await until(opts.graceS * 1000);
      // Whatever is left goes now; the next file starts once it is gone (ports, cgroups).
      signalGroup(pgid, "SIGKILL");
      await until(5000);
    })());
  const timer = setTimeout(() => {
    timedOut = true;
    log(`TIMEOUT: ${file} after ${opts.timeoutS} s`);
    void stop();
  }, opts.timeoutS * 1000);
  if (child.pid !== undefined) running = { pgid: child.pid, stop: () => void stop() };
  const [code, signal] = await exited;
  clearTimeout(timer);
  if (stopping) await stopping;
  running = undefined;
  const outcome: Outcome = timedOut ? "timeout" : code === 0 ? "passed" : "failed";
  return { file, outcome, code, signal, seconds: (performance.now() - started) / 1000 };
}

/** Runs `opts.files` one after the other; resolves with one result per file. */
export async function runFiles(opts: RunOptions): Promise<FileResult[]> {
  const results: FileResult[] = [];
  for (const file of opts.files) results.push(await runFile(file, opts));
  return results;
}

export interface Cli {
  patterns: string[];
  timeoutS: number;
  graceS: number;
  testArgs: string[];
}

function seconds(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number of seconds, got ${JSON.stringify(value)}`);
  return n;
}

/** Parses the command line; LOSTWRITE_TEST_TIMEOUT (seconds) overrides --timeout. */
export function parseArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): Cli {
  const cli: Cli = { patterns: [], timeoutS: 600, graceS: 5, testArgs: [] };
  for (const arg of argv) {
    const [name, value = ""] = arg.split(/=(.*)/s, 2) as [string, string?];
    if (name === "--timeout") cli.timeoutS = seconds("--timeout", value);
    else if (name === "--grace") cli.graceS = seconds("--grace", value);
    else if (name.startsWith("--test-")) cli.testArgs.push(arg);
    else if (arg.startsWith("-")) throw new Error(`unknown option ${arg}`);
    else cli.patterns.push(arg);
  }
  if (env.LOSTWRITE_TEST_TIMEOUT) cli.timeoutS = seconds("LOSTWRITE_TEST_TIMEOUT", env.LOSTWRITE_TEST_TIMEOUT);
  if (cli.patterns.length === 0) throw new Error("no test files or globs given");
  return cli;
}

/** The files the patterns match, each once, sorted; a pattern that matches nothing is an error. */
export function expandPatterns(patterns: string[]): string[] {
  const files = new Set<string>();
  for (const pattern of patterns) {
    const matched = globSync(pattern);
    if (matched.length === 0) throw new Error(`no test file matches ${pattern}`);
    for (const file of matched) files.add(file);
  }
  return [...files].sort();
}

export function summary(results: FileResult[], seconds: number): string[] {
  const count = (outcome: Outcome): number => results.filter((r) => r.outcome === outcome).length;
  const lines = [
    `runTests: ${results.length} files, ${count("passed")} passed, ${count("failed")} failed, ${count("timeout")} timed out, in ${Math.round(seconds)} s`,
  ];
  for (const r of results) {
    if (r.outcome === "timeout") lines.push(`  TIMEOUT ${r.file} (killed after ${Math.round(r.seconds)} s)`);
    else if (r.outcome === "failed") lines.push(`  FAILED  ${r.file} (${r.signal ? `signal ${r.signal}` : `exit ${r.code}`})`);
  }
  return lines;
}

async function main(): Promise<number> {
  let cli: Cli;
  let files: string[];
  try {
    cli = parseArgs(process.argv.slice(2));
    files = expandPatterns(cli.patterns);
  } catch (error) {
    console.error(`runTests: ${(error as Error).message}`);
    return 2;
  }
  // The files run in groups of their own, out of reach of a terminal's ^C: pass it on.
  let interrupted: NodeJS.Signals | undefined;
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => {
      interrupted = signal;
      running?.stop();
    });
  }
  const started = performance.now();
  const results: FileResult[] = [];
  for (const file of files) {
    if (interrupted) break;
    console.log(`# ${file}`);
    results.push(...(await runFiles({ ...cli, files: [file] })));
  }
  for (const line of summary(results, (performance.now() - started) / 1000)) console.log(line);
  if (interrupted) return interrupted === "SIGINT" ? 130 : 143;
  return results.every((r) => r.outcome === "passed") ? 0 : 1;
}

if (import.meta.main) process.exitCode = await main();
