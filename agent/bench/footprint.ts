// `npm run bench:footprint`: what the agent holds and spends at idle, Node
// and bpftrace alike, run as the image runs it. Not a test: it prints numbers,
// for the DaemonSet's requests and limits (deploy/base/daemonset.yaml).
//
// USAGE: npm run build && npm run bench:footprint -- [--settle S] [--window S]
//          [--slice S] [--sends N] [--variants sockets,syscalls] [--no-snapshot] [--no-floor]
//          [--rest S] [--baseline DIR] [--kubernetes]
//        (root, bpftrace, gcc)
//
// WHAT RUNS. The compiled agent (dist/, from `npm run build`; this bench
// builds nothing and stops when dist/ is missing or older than agent/src),
// as deploy/Dockerfile starts it: `node dist/agent/src/cli.js agent` with
// NODE_ENV=production and NODE_OPTIONS=--max-semi-space-size=2, and the
// flags deploy/base/daemonset.yaml passes (all three listeners on, Go probes
// on by default), on loopback ports here; --kubernetes only with this
// bench's --kubernetes (the mix's agent then lists and watches a real
// kube-apiserver started here), else its watches are not counted.
// The target is a real process: the C send loop of probeCostLoop.c,
// connected to a loopback server that the agent is given as --apiserver,
// sending N 100-byte messages once a second (--sends, 0 for none) — an
// operator at rest. One agent per probe variant, one after the other.
//
// WHAT IS MEASURED, once /readyz says the probe is attached and --settle
// seconds have passed (start-up's LLVM compile and first scans are over):
// over --window seconds, for the Node process and each bpftrace it runs,
// RSS, PSS and anonymous memory (/proc/PID/smaps_rollup; the mean of a
// sample every --slice seconds), peak RSS since start (VmHWM: bpftrace's
// peak is its compile), and CPU (utime + stime, /proc/PID/stat) in
// millicores over the window, and per --slice (lowest and median of the
// slices: other work on the machine only ever adds CPU). After the window
// a preload (footprintPreload.js, through NODE_OPTIONS --import: the agent
// is not changed) writes Node's heap numbers, the modules it loaded and a
// heap snapshot, summarised at the end: biggest constructors, and the
// packages loaded with their files' size. Then, measured alike, the floor:
// Node running an empty timer with the same NODE_OPTIONS, and bpftrace
// running an empty program on the send tracepoint.
//
// HOW TO READ. A container's memory is its anonymous memory plus the file
// pages it touched first: the LLVM and clang code a bpftrace ran to compile
// is file-backed, shared between bpftrace processes (PSS splits it) and
// reclaimable under pressure, and the agent pages it out of each bpftrace
// once its program is attached (agent/src/sources/probe/compilerPages.ts;
// an agent without that keeps it, most of its bpftrace's RSS); anon is what
// only a kill gives back.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { freeLoopbackPort } from "../src/loopbackPort.ts";
import { CompilerPages, pageoutHelper } from "../src/sources/probe/compilerPages.ts";
import { AgentMetrics } from "../src/telemetry/metrics.ts";
import { cpuSeconds, descendants, liveComm, sleep } from "./agentRun.ts";
import { bpfFdInfo } from "./bpfProgramStats.ts";
import { median } from "./costTable.ts";
import { buildMixBinaries, MIX_TARGET_COMM, mixSteps, startMixApiserver, waitForMetric, type MixBinaries } from "./footprintMix.ts";
import { compileLoops, SendLoop, startServer, type LineProcess } from "./loopProcesses.ts";
import { textTable } from "./textTable.ts";
import { startControlPlane } from "../../testbed/controlplane/controlPlane.ts";
import { FLOOR_TRACEPOINTS, startBpftrace } from "./toolRun.ts";

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, "../..");
const CLI = path.join(repoRoot, "dist/agent/src/cli.js");
const PRELOAD = path.join(here, "footprintPreload.js");
/** deploy/Dockerfile's NODE_OPTIONS. */
const IMAGE_NODE_OPTIONS = "--max-semi-space-size=2";
const READY_TIMEOUT_MS = 90_000;
const STOP_TIMEOUT_MS = 10_000;
const MiB = 1024 * 1024;

const USAGE = `usage: npm run bench:footprint -- [--settle S] [--window S] [--slice S] [--sends N] [--variants LIST] [--no-snapshot]

  --settle S      seconds after /readyz before measuring (default 30)
  --window S      seconds measured (default 60)
  --slice S       memory sample and CPU slice length, seconds (default 10)
  --sends N       the target's sends to the apiserver per second, 0 for none (default 10)
  --variants L    probe variants, comma-separated (default sockets,syscalls)
  --no-snapshot   skip the heap snapshot (heap numbers and modules are still printed)
  --no-floor      skip the floor (an idle Node and an empty bpftrace program, measured alike)
  --rest S        the mix measured once more, S seconds after its last step (default 90: the agent
                  merges a kind's uprobe programs once its files have not changed for a minute), 0: not
  --baseline DIR  another checkout, built (npm run build there): its agent runs the mix first, in the
                  same run, and the two are printed side by side
  --kubernetes    the mix's agent also runs the DaemonSet's Kubernetes mode (--kubernetes: it lists
                  and watches this node's pods and the apiserver's EndpointSlices) against a real
                  kube-apiserver and etcd, started here (built from the Go module proxy on first use;
                  not counted: they are the cluster's, not the agent's)`;

interface Options {
  settle: number;
  window: number;
  slice: number;
  sends: number;
  variants: string[];
  snapshot: boolean;
  floor: boolean;
  /** The one-target run per probe variant instead of the mix. */
  single: boolean;
  /** The mix's write interval, seconds. */
  interval: number;
  /** Seconds after the mix's last step before it is measured at rest; 0: not measured. */
  rest: number;
  /** A checkout whose compiled agent (dist/) is measured first, in the same run, for a side-by-side table. */
  baseline: string | null;
  /** Whether the mix's agent also runs Kubernetes mode, against a real kube-apiserver. */
  kubernetes: boolean;
}

function options(): Options {
  const { values } = parseArgs({
    options: {
      settle: { type: "string" },
      window: { type: "string" },
      slice: { type: "string" },
      sends: { type: "string" },
      variants: { type: "string" },
      "no-snapshot": { type: "boolean" },
      "no-floor": { type: "boolean" },
      single: { type: "boolean" },
      interval: { type: "string" },
      rest: { type: "string" },
      baseline: { type: "string" },
      kubernetes: { type: "boolean" },
      help: { type: "boolean" },
    },
    strict: true,
  });
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const number = (name: string, value: string | undefined, fallback: number, min: number): number => {
    const n = value === undefined ? fallback : Number(value);
    if (!Number.isFinite(n) || n < min) throw new Error(`--${name} must be a number >= ${min}, got ${JSON.stringify(value)}`);
    return n;
  };
  const variants = (values.variants ?? "sockets,syscalls").split(",").filter(Boolean);
  for (const v of variants) if (v !== "sockets" && v !== "syscalls") throw new Error(`--variants: unknown variant ${JSON.stringify(v)}`);
  const window = number("window", values.window, 60, 1);
  return {
    settle: number("settle", values.settle, 30, 0),
    window,
    slice: Math.min(number("slice", values.slice, 10, 1), window),
    sends: Math.floor(number("sends", values.sends, 10, 0)),
    variants,
    snapshot: !values["no-snapshot"],
    floor: !values["no-floor"],
    single: values.single ?? false,
    interval: number("interval", values.interval, 2, 0.1),
    rest: number("rest", values.rest, 90, 0),
    baseline: values.baseline ?? null,
    kubernetes: values.kubernetes ?? false,
  };
}

/** Stops with the reason when dist/ is missing or any agent/src module is newer than its build. */
function checkBuild(): void {
  if (!existsSync(CLI)) throw new Error(`${path.relative(repoRoot, CLI)} is missing: run npm run build first (this bench runs the compiled agent, as the image does)`);
  const stale: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(file);
      else if (entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts")) {
        const built = path.join(repoRoot, "dist", path.relative(repoRoot, file)).replace(/\.ts$/, ".js");
        if (!existsSync(built) || statSync(built).mtimeMs < statSync(file).mtimeMs) stale.push(path.relative(repoRoot, file));
      }
    }
  };
  walk(path.join(repoRoot, "agent/src"));
  if (stale.length > 0) {
    throw new Error(`dist/ is older than agent/src (${stale.slice(0, 3).join(", ")}${stale.length > 3 ? `, and ${stale.length - 3} more` : ""}): run npm run build first`);
  }
}

// --- /proc readings ---------------------------------------------------------------

interface Memory {
  rss: number;
  pss: number;
  anon: number;
}

/** RSS, PSS and anonymous bytes from /proc/PID/smaps_rollup; null once the process is gone. */
function memory(pid: number): Memory | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
  } catch {
    return null;
  }
  const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? NaN) * 1024;
  return { rss: kb("Rss"), pss: kb("Pss"), anon: kb("Anonymous") };
}

/**
 * Resident bytes of `pid` by file (file-backed mappings, by path) and its
 * anonymous bytes, from /proc/PID/smaps: with them a group's memory can be
 * counted with each file's pages once, as the cgroup is charged, whatever
 * other processes on the machine map the same files (PSS would split those
 * pages with them: on a machine where other bpftrace processes run, PSS
 * understates the agent's share of LLVM's pages).
 */
function residentByFile(pid: number): { files: Map<string, number>; anon: number } | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/smaps`, "utf8");
  } catch {
    return null;
  }
  const files = new Map<string, number>();
  let anon = 0;
  let file: string | null = null;
  for (const line of text.split("\n")) {
    const header = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (header) {
      file = header[1]!.startsWith("/") ? header[1]! : null;
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss && file !== null) files.set(file, (files.get(file) ?? 0) + Number(rss[1]) * 1024);
    const anonymous = /^Anonymous:\s+(\d+) kB/.exec(line);
    if (anonymous) anon += Number(anonymous[1]) * 1024;
  }
  return { files, anon };
}

/** A group's resident memory with each file's pages counted once: every process's anonymous bytes, and per file the most any of them has resident. */
function groupResident(pids: number[]): number {
  const files = new Map<string, number>();
  let total = 0;
  for (const pid of pids) {
    const r = residentByFile(pid);
    if (r === null) continue;
    total += r.anon;
    for (const [file, bytes] of r.files) files.set(file, Math.max(files.get(file) ?? 0, bytes));
  }
  for (const bytes of files.values()) total += bytes;
  return total;
}

/** The memlock bytes of the BPF maps `pid` holds open (fdinfo), each map once. */
function bpfMapBytes(pid: number): number {
  const maps = new Map(bpfFdInfo(pid, "map").map((field) => [field("map_id"), field("memlock")]));
  return [...maps.values()].reduce((sum, bytes) => sum + bytes, 0);
}

/** Peak RSS since the process started (VmHWM), bytes. */
function peakRss(pid: number): number {
  try {
    return Number(/^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN) * 1024;
  } catch {
    return NaN;
  }
}


// --- the agent, as the image runs it -------------------------------------------------

interface Agent {
  child: ChildProcess;
  url: string;
  stderr: () => string;
  stop(): Promise<void>;
}

async function startAgent(variant: string, targets: string[], apiserver: string, dir: string, snapshot: boolean, cli = CLI): Promise<Agent> {
  const [port, otlpPort, grpcPort] = [await freeLoopbackPort(), await freeLoopbackPort(), await freeLoopbackPort()];
  const child = spawn(
    process.execPath,
    [
      cli, "agent",
      ...targets,
      "--apiserver", apiserver,
      // deploy/base/daemonset.yaml's listeners (there on 0.0.0.0), here on loopback.
      "--listen", `127.0.0.1:${port}`,
      "--otlp-listen", `127.0.0.1:${otlpPort}`,
      "--otlp-grpc-listen", `127.0.0.1:${grpcPort}`,
      "--probe-variant", variant,
    ],
    {
      cwd: dir,
      stdio: ["ignore", "ignore", "pipe"],
      env: {
        ...process.env,
        NODE_ENV: "production",
        NODE_OPTIONS: `${IMAGE_NODE_OPTIONS} --import=${PRELOAD}`,
        FOOTPRINT_OUT: path.join(dir, `${variant}.json`),
        ...(snapshot ? { FOOTPRINT_HEAP_SNAPSHOT: path.join(dir, `${variant}.heapsnapshot`) } : {}),
      },
    },
  );
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr = (stderr + chunk).slice(-4000)));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  const stop = async (): Promise<void> => {
    const watched = descendants(child.pid ?? -1).filter((pid) => liveComm(pid) === "bpftrace");
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), STOP_TIMEOUT_MS);
    await exited;
    clearTimeout(timer);
    const deadline = Date.now() + STOP_TIMEOUT_MS;
    while (watched.some((pid) => liveComm(pid) === "bpftrace")) {
      if (Date.now() > deadline) {
        for (const pid of watched) if (liveComm(pid) === "bpftrace") process.kill(pid, "SIGKILL");
      }
      await sleep(50);
    }
  };
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`agent (${variant}) exited (${child.signalCode ?? child.exitCode}): ${stderr.trim()}`);
    try {
      if ((await fetch(`${url}/readyz`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`agent (${variant}) not ready after ${READY_TIMEOUT_MS / 1000} s: ${stderr.trim()}`);
    }
    await sleep(200);
  }
  return { child, url, stderr: () => stderr, stop };
}

// --- one variant -----------------------------------------------------------------------

interface Row {
  name: string;
  pid: number;
  memory: Memory;
  peak: number;
  /** Kernel memory of the BPF maps it holds (their memlock): not in RSS, charged to its cgroup. */
  maps: number;
  /** millicores over the window */
  cpu: number;
  /** millicores per slice */
  slices: number[];
}

/** Sends `perSecond` messages once a second until stopped. */
function keepSending(loop: SendLoop, perSecond: number): () => Promise<void> {
  let running = perSecond > 0;
  const done = (async () => {
    while (running) {
      const started = Date.now();
      await loop.run(perSecond);
      await sleep(Math.max(0, 1000 - (Date.now() - started)));
    }
  })();
  return async () => {
    running = false;
    await done;
  };
}

async function measureVariant(variant: string, opts: Options, target: SendLoop, apiserver: string, dir: string): Promise<Row[]> {
  const agent = await startAgent(variant, ["--target-pid", String(target.process.pid)], apiserver, dir, opts.snapshot);
  const stopSending = keepSending(target, opts.sends);
  try {
    process.stderr.write(`${variant}: ready; settling ${opts.settle} s, then measuring ${opts.window} s\n`);
    await sleep(opts.settle * 1000);
    const node = agent.child.pid!;
    const bpftrace = descendants(node).filter((pid) => liveComm(pid) === "bpftrace");
    const rows = await sampleProcesses(
      [{ name: "node (agent)", pid: node }, ...bpftrace.map((pid) => ({ name: `bpftrace ${probeKind(pid)}`, pid }))],
      opts,
    );
    // Heap numbers, modules, snapshot: after the window, as the snapshot allocates.
    agent.child.kill("SIGUSR2");
    const report = path.join(dir, `${variant}.json`);
    const deadline = Date.now() + 120_000;
    while (!existsSync(report) && Date.now() < deadline) await sleep(200);
    await sleep(500); // the file is written in one call; let it land
    return rows;
  } finally {
    await stopSending();
    await agent.stop();
  }
}

/** What the agent holds after each step of the mix: the socket probe alone, then each process added. */
interface MixResult {
  step: string;
  /** Seconds from the process's start to its program counted as attached (a file's program compiled and attached). */
  attachSeconds: number | null;
  rows: Row[];
  /** The whole group's PSS, anon, resident with files once and BPF maps: the mean of the per-sample sums over the processes alive then. */
  group: { pss: number; anon: number; resident: number; maps: number };
  /** Processes that started or ended inside the window (a bpftrace restarted by the agent). */
  churn: number;
}

/**
 * The agent's whole process group (node and every bpftrace it runs), listed
 * afresh at every sample: a bpftrace the agent restarts inside the window
 * (another agent's load can make one miss a heartbeat) is counted while it
 * lives, and counted as churn. Rows: each process, the mean of the samples
 * it was alive in.
 */
async function sampleGroup(node: number, opts: Options): Promise<Pick<MixResult, "rows" | "group" | "churn">> {
  const seen = new Map<number, { name: string; mem: Memory[]; maps: number; cpu: number[]; first: number; last: number }>();
  const totals: { pss: number; anon: number; resident: number; maps: number }[] = [];
  const sliceCount = Math.max(1, Math.round(opts.window / opts.slice));
  const started = Date.now();
  for (let i = 0; i <= sliceCount; i++) {
    if (i > 0) await sleep(started + i * opts.slice * 1000 - Date.now());
    const pids = [node, ...descendants(node).filter((pid) => liveComm(pid) === "bpftrace")];
    const total = { pss: 0, anon: 0, resident: groupResident(pids), maps: 0 };
    for (const pid of pids) {
      const m = memory(pid);
      if (m === null) continue;
      const entry = seen.get(pid) ?? { name: pid === node ? "node (agent)" : `bpftrace ${probeKind(pid)}`, mem: [], maps: 0, cpu: [], first: i, last: i };
      entry.mem.push(m);
      entry.maps = bpfMapBytes(pid);
      entry.cpu.push(cpuSeconds(pid));
      entry.last = i;
      seen.set(pid, entry);
      total.pss += m.pss;
      total.anon += m.anon;
      total.maps += entry.maps;
    }
    totals.push(total);
  }
  const seconds = (Date.now() - started) / 1000;
  const mean = (values: number[]): number => values.reduce((a, b) => a + b, 0) / values.length;
  const rows = [...seen].map(([pid, e]): Row => ({
    name: e.name,
    pid,
    memory: { rss: mean(e.mem.map((m) => m.rss)), pss: mean(e.mem.map((m) => m.pss)), anon: mean(e.mem.map((m) => m.anon)) },
    peak: peakRss(pid),
    maps: e.maps,
    cpu: e.cpu.length > 1 ? ((e.cpu.at(-1)! - e.cpu[0]!) / (((e.last - e.first) / sliceCount) * seconds)) * 1000 : NaN,
    slices: e.cpu.slice(1).map((mark, j) => ((mark - e.cpu[j]!) / (seconds / sliceCount)) * 1000),
  }));
  return {
    rows,
    group: { pss: mean(totals.map((t) => t.pss)), anon: mean(totals.map((t) => t.anon)), resident: mean(totals.map((t) => t.resident)), maps: mean(totals.map((t) => t.maps)) },
    churn: [...seen.values()].filter((e) => e.first > 0 || e.last < sliceCount).length,
  };
}

/** The compiled agent a run measures: this checkout's, or --baseline's. */
interface AgentBuild {
  label: string;
  cli: string;
}

async function measureMix(opts: Options, dir: string, binaries: MixBinaries, build: AgentBuild, kubernetesArgs: string[]): Promise<MixResult[]> {
  const intervalMs = opts.interval * 1000;
  const server = await startMixApiserver(dir, intervalMs);
  const children: ChildProcess[] = [];
  const results: MixResult[] = [];
  let agent: Agent | null = null;
  try {
    agent = await startAgent("sockets", ["--target-comm", MIX_TARGET_COMM, ...kubernetesArgs], `127.0.0.1:${server.api.port}`, dir, opts.snapshot, build.cli);
    const measure = async (step: string, attachSeconds: number | null, settle = opts.settle): Promise<void> => {
      process.stderr.write(`mix (${build.label}): ${step}; settling ${settle} s, then measuring ${opts.window} s\n`);
      await sleep(settle * 1000);
      results.push({ step, attachSeconds, ...(await sampleGroup(agent!.child.pid!, opts)) });
    };
    await measure("socket probe alone", null);
    for (const step of mixSteps(binaries)) {
      const started = Date.now();
      children.push(step.start(server.api, intervalMs));
      await waitForMetric(agent.url, step.attached.metric, step.attached.value, 120_000);
      await measure(step.name, (Date.now() - started) / 1000);
    }
    // Where the agent merges a kind's programs once its files have not
    // changed for a minute, the node at rest is only seen after that and the
    // merge's compile: --rest seconds after the last step's window.
    if (opts.rest > 0) await measure(`at rest (${opts.rest} s more)`, null, opts.rest);
    agent.child.kill("SIGUSR2");
    const report = path.join(dir, "sockets.json");
    const deadline = Date.now() + 120_000;
    while (!existsSync(report) && Date.now() < deadline) await sleep(200);
    await sleep(500); // the file is written in one call; let it land
    return results;
  } finally {
    for (const child of children) child.kill("SIGKILL");
    await agent?.stop();
    await server.stop();
  }
}

/** --baseline's compiled agent; stops with the reason when it has none. */
function baselineBuild(dir: string): AgentBuild {
  const cli = path.join(path.resolve(dir), "dist/agent/src/cli.js");
  if (!existsSync(cli)) throw new Error(`--baseline ${dir}: ${cli} is missing: run npm run build there first`);
  return { label: `baseline ${dir}`, cli };
}

/** The baseline's mix and this checkout's, step by step: group PSS and bpftrace processes. */
function printSideBySide(baseline: string, before: MixResult[], after: MixResult[]): void {
  const bpftraceCount = (r: MixResult | undefined): string => (r === undefined ? "-" : String(r.rows.filter((x) => x.name.startsWith("bpftrace")).length));
  const nodePss = (r: MixResult | undefined): number => (r === undefined ? NaN : r.rows.filter((x) => !x.name.startsWith("bpftrace")).reduce((s, x) => s + x.memory.pss, 0));
  console.log(`\n== side by side, one run: ${baseline} against this checkout (group PSS, MiB) ==`);
  console.log(
    textTable(
      ["step", "bpftrace before", "bpftrace after", "node PSS before", "node PSS after", "group PSS before", "group PSS after", "difference"],
      after.map((r, i) => {
        const b = before[i];
        return [r.step, bpftraceCount(b), bpftraceCount(r), mib(nodePss(b)), mib(nodePss(r)), mib(b?.group.pss ?? NaN), mib(r.group.pss), mib(r.group.pss - (b?.group.pss ?? NaN))];
      }),
    ),
  );
}

function printMix(label: string, results: MixResult[], floor: Row[] | null): void {
  const sum = (rows: Row[], f: (r: Row) => number): number => rows.reduce((s, r) => s + f(r), 0);
  const bpftrace = (rows: Row[]): Row[] => rows.filter((r) => r.name.startsWith("bpftrace"));
  const node = (rows: Row[]): Row[] => rows.filter((r) => !r.name.startsWith("bpftrace"));
  console.log(`\n== the mix (${label}), step by step: PSS (smaps_rollup; shared pages split between the processes sharing them) ==`);
  const lines = results.map((r, i) => {
    const before = i === 0 ? NaN : results[i - 1]!.group.pss;
    return [
      r.step,
      `${bpftrace(r.rows).length}${r.churn > 0 ? ` (${r.churn} came or went)` : ""}`,
      mib(sum(node(r.rows), (x) => x.memory.pss)),
      mib(sum(bpftrace(r.rows), (x) => x.memory.pss)),
      mib(r.group.pss),
      i === 0 ? "" : `${r.group.pss >= before ? "+" : ""}${mib(r.group.pss - before)}`,
      mib(r.group.anon),
      mib(r.group.resident),
      mib(r.group.maps),
      r.attachSeconds === null ? "" : r.attachSeconds.toFixed(1),
    ];
  });
  if (floor) {
    lines.push(["floor: idle Node + empty bpftrace", String(bpftrace(floor).length), mib(sum(node(floor), (x) => x.memory.pss)), mib(sum(bpftrace(floor), (x) => x.memory.pss)), mib(sum(floor, (x) => x.memory.pss)), "", mib(sum(floor, (x) => x.memory.anon)), mib(floorResident), mib(sum(floor, (x) => x.maps)), ""]);
  }
  console.log(textTable(["step", "bpftrace", "node PSS", "bpftrace PSS", "group PSS", "added", "group anon", "files once", "BPF maps", "attached in s"], lines));
  console.log("(MiB, means over the window; group: the sum over the processes alive at each sample; files once: the group's resident memory with each file's pages counted once, as its cgroup is charged, whatever else maps them; BPF maps: kernel memory outside PSS that the cgroup is also charged; attached in: from the process's start to its program counted attached)");
}

/**
 * The floor under the agent's footprint: Node running an empty timer with the
 * image's NODE_OPTIONS, and bpftrace running an empty program on the send
 * tracepoint (LLVM and clang loaded, one program attached), its compiler
 * paged out once attached as the agent does (compilerPages.ts). Measured like
 * a variant; no agent can hold less than these two.
 */
/** The floor's resident memory with each file once, taken at the end of its window. */
let floorResident = NaN;

async function measureFloor(opts: Options): Promise<Row[]> {
  const node = spawn(process.execPath, ["-e", "setInterval(() => {}, 60_000)"], {
    stdio: "ignore",
    env: { ...process.env, NODE_ENV: "production", NODE_OPTIONS: IMAGE_NODE_OPTIONS },
  });
  const bpftrace = await startBpftrace(FLOOR_TRACEPOINTS, "").catch((err: unknown) => {
    node.kill("SIGKILL");
    throw err;
  });
  try {
    const pages = new CompilerPages({ helper: pageoutHelper(), metrics: new AgentMetrics(), log: { info: (message) => process.stderr.write(`floor: ${message}\n`), warn: (message) => process.stderr.write(`floor: ${message}\n`) } });
    await pages.attached(bpftrace.bpftrace()[0]!);
    process.stderr.write(`floor: ready; settling ${opts.settle} s, then measuring ${opts.window} s\n`);
    await sleep(opts.settle * 1000);
    const processes = [
      { name: "node (empty timer)", pid: node.pid! },
      { name: "bpftrace (empty program)", pid: bpftrace.bpftrace()[0]! },
    ];
    const rows = await sampleProcesses(processes, opts);
    floorResident = groupResident(processes.map((p) => p.pid));
    return rows;
  } finally {
    node.kill("SIGKILL");
    await bpftrace.stop();
  }
}

/** Samples memory every --slice seconds and CPU per slice, over --window seconds. */
async function sampleProcesses(processes: { name: string; pid: number }[], opts: Options): Promise<Row[]> {
  const pids = processes.map((p) => p.pid);
  const samples = new Map<number, Memory[]>(pids.map((pid) => [pid, []]));
  const cpuMarks = new Map<number, number[]>(pids.map((pid) => [pid, []]));
  const take = (): void => {
    for (const pid of pids) {
      const m = memory(pid);
      if (m) samples.get(pid)!.push(m);
      cpuMarks.get(pid)!.push(cpuSeconds(pid));
    }
  };
  const started = Date.now();
  take();
  const sliceCount = Math.max(1, Math.round(opts.window / opts.slice));
  for (let i = 1; i <= sliceCount; i++) {
    await sleep(started + i * opts.slice * 1000 - Date.now());
    take();
  }
  const seconds = (Date.now() - started) / 1000;
  const sliceSeconds = seconds / sliceCount;
  return processes.map(({ name, pid }): Row => {
    const mem = samples.get(pid)!;
    const marks = cpuMarks.get(pid)!;
    const mean = (f: (m: Memory) => number): number => mem.reduce((s, m) => s + f(m), 0) / mem.length;
    return {
      name,
      pid,
      memory: { rss: mean((m) => m.rss), pss: mean((m) => m.pss), anon: mean((m) => m.anon) },
      peak: peakRss(pid),
      maps: bpfMapBytes(pid),
      cpu: ((marks.at(-1)! - marks[0]!) / seconds) * 1000,
      slices: marks.slice(1).map((mark, j) => ((mark - marks[j]!) / sliceSeconds) * 1000),
    };
  });
}

/** Which program a bpftrace runs, from the first line of the program file on its command line. */
function probeKind(pid: number): string {
  try {
    const args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    const file = args.find((a) => a.endsWith(".bt"));
    const first = file === undefined ? "" : readFileSync(file, "utf8").split("\n", 1)[0]!;
    if (/one Go binary/.test(first)) return "(go probe)";
    if (/one OpenSSL/.test(first)) return "(tls probe)";
    if (/uprobe programs/.test(first)) return "(uprobe programs)";
    return "(socket probe)";
  } catch {
    return "";
  }
}

// --- printing ----------------------------------------------------------------------------

const mib = (bytes: number): string => (Number.isFinite(bytes) ? (bytes / MiB).toFixed(1) : "-");
const mc = (millicores: number): string => (Number.isFinite(millicores) ? millicores.toFixed(1) : "-");



function printRows(title: string, rows: Row[], opts: Options): void {
  const total: Row = {
    name: "total",
    pid: 0,
    memory: {
      rss: rows.reduce((s, r) => s + r.memory.rss, 0),
      pss: rows.reduce((s, r) => s + r.memory.pss, 0),
      anon: rows.reduce((s, r) => s + r.memory.anon, 0),
    },
    peak: rows.reduce((s, r) => s + r.peak, 0),
    maps: rows.reduce((s, r) => s + r.maps, 0),
    cpu: rows.reduce((s, r) => s + r.cpu, 0),
    slices: rows[0]!.slices.map((_, j) => rows.reduce((s, r) => s + (r.slices[j] ?? 0), 0)),
  };
  console.log(`\n== ${title}: ${opts.window} s after ${opts.settle} s settling ==`);
  console.log(
    textTable(
      ["process", "pid", "RSS MiB", "PSS MiB", "anon MiB", "peak RSS", "BPF maps", "CPU m", `min/${opts.slice}s`, `median/${opts.slice}s`],
      [...rows, total].map((r) => [
        r.name,
        r.pid ? String(r.pid) : "",
        mib(r.memory.rss),
        mib(r.memory.pss),
        mib(r.memory.anon),
        mib(r.peak),
        mib(r.maps),
        mc(r.cpu),
        mc(Math.min(...r.slices)),
        mc(median(r.slices)),
      ]),
    ),
  );
  console.log(
    "(memory: mean of the samples; BPF maps: their memlock, kernel memory outside RSS that the cgroup is also charged; CPU m: millicores over the window, and the lowest and median slice)",
  );
}

interface PreloadReport {
  memoryUsage: NodeJS.MemoryUsage;
  heap: { total_heap_size: number; used_heap_size: number; heap_size_limit: number; malloced_memory: number; external_memory: number };
  spaces: { space_name: string; space_size: number; space_used_size: number }[];
  modules: string[];
  snapshot: string | null;
}

function printHeap(variant: string, dir: string): void {
  const file = path.join(dir, `${variant}.json`);
  if (!existsSync(file)) {
    console.log(`(${variant}: the preload wrote no heap report)`);
    return;
  }
  const report = JSON.parse(readFileSync(file, "utf8")) as PreloadReport;
  const u = report.memoryUsage;
  console.log(`\nNode heap (${variant}), process.memoryUsage() before the snapshot:`);
  console.log(
    `  rss ${mib(u.rss)}  heapUsed ${mib(u.heapUsed)}  heapTotal ${mib(u.heapTotal)}  external ${mib(u.external)}  arrayBuffers ${mib(u.arrayBuffers)}  malloced ${mib(report.heap.malloced_memory)} MiB`,
  );
  console.log(`  spaces (used/size MiB): ${report.spaces.filter((s) => s.space_size > 0).map((s) => `${s.space_name.replace(/_space$/, "")} ${mib(s.space_used_size)}/${mib(s.space_size)}`).join(", ")}`);
  printModules(report.modules);
  if (report.snapshot && existsSync(report.snapshot)) printSnapshot(report.snapshot);
}

/** Modules loaded, by package: files and bytes of source (code memory grows with it). */
function printModules(urls: string[]): void {
  const byPackage = new Map<string, { files: number; bytes: number }>();
  let builtins = 0;
  for (const url of urls) {
    if (!url.startsWith("file:")) {
      builtins++;
      continue;
    }
    const file = fileURLToPath(url);
    const nm = file.lastIndexOf("/node_modules/");
    let name: string;
    if (nm === -1) name = file.startsWith(path.join(repoRoot, "dist")) ? "(agent, dist/)" : path.relative(repoRoot, file).startsWith("agent/bench") ? "(bench preload)" : file;
    else {
      const parts = file.slice(nm + "/node_modules/".length).split("/");
      name = parts[0]!.startsWith("@") ? `${parts[0]}/${parts[1]}` : parts[0]!;
    }
    const entry = byPackage.get(name) ?? { files: 0, bytes: 0 };
    entry.files++;
    entry.bytes += statSync(file, { throwIfNoEntry: false })?.size ?? 0;
    byPackage.set(name, entry);
  }
  const sorted = [...byPackage].sort((a, b) => b[1].bytes - a[1].bytes);
  console.log(`  modules loaded: ${urls.length} (${builtins} node: builtins); by package, source KiB (files):`);
  const cells = sorted.map(([name, e]) => `${name} ${(e.bytes / 1024).toFixed(0)} (${e.files})`);
  for (let i = 0; i < cells.length; i += 4) console.log(`    ${cells.slice(i, i + 4).join(", ")}`);
}

/** The heap snapshot's biggest node types and object constructors, by self size. */
function printSnapshot(file: string): void {
  const snap = JSON.parse(readFileSync(file, "utf8")) as {
    snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
    nodes: number[];
    strings: string[];
  };
  const fields = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const [typeAt, nameAt, sizeAt] = [fields.indexOf("type"), fields.indexOf("name"), fields.indexOf("self_size")];
  const byType = new Map<string, { count: number; size: number }>();
  const byName = new Map<string, { count: number; size: number }>();
  const add = (map: Map<string, { count: number; size: number }>, key: string, size: number): void => {
    const e = map.get(key) ?? { count: 0, size: 0 };
    e.count++;
    e.size += size;
    map.set(key, e);
  };
  let total = 0;
  for (let i = 0; i < snap.nodes.length; i += fields.length) {
    const type = types[snap.nodes[i + typeAt]!]!;
    const size = snap.nodes[i + sizeAt]!;
    total += size;
    add(byType, type, size);
    // Strings' and code's names are their contents; group those by type.
    const key = type === "object" || type === "native" || type === "hidden" || type === "array" ? `${snap.strings[snap.nodes[i + nameAt]!]} [${type}]` : `(${type})`;
    add(byName, key.length > 60 ? `${key.slice(0, 57)}...` : key, size);
  }
  const top = (map: Map<string, { count: number; size: number }>, n: number): string[][] =>
    [...map].sort((a, b) => b[1].size - a[1].size).slice(0, n).map(([k, e]) => [k, String(e.count), mib(e.size)]);
  console.log(`  heap snapshot ${path.basename(file)}: ${mib(total)} MiB in ${snap.nodes.length / fields.length} nodes (after the snapshot's GC)`);
  console.log(textTable(["  by type", "count", "MiB"], top(byType, 8).map(([a, ...r]) => [`  ${a}`, ...r] as string[])));
  console.log(textTable(["  biggest (constructor or kind)", "count", "MiB"], top(byName, 15).map(([a, ...r]) => [`  ${a}`, ...r] as string[])));
}

// --- main ----------------------------------------------------------------------------------

async function main(): Promise<void> {
  const opts = options();
  checkBuild();
  if (process.getuid?.() !== 0) throw new Error("run as root: the agent attaches bpftrace probes");
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-footprint-"));
  const cpu = os.availableParallelism() - 1;
  const processes: LineProcess[] = [];
  const stops: (() => Promise<void>)[] = [];
  try {
    const binary = compileLoops(dir);
    const server = await startServer(binary, cpu);
    processes.push(server.process);
    const target = new SendLoop("target", binary, server.port, cpu);
    processes.push(target.process);
    await target.ready();
    const apiserver = `127.0.0.1:${server.port}`;
    console.log(`lostwrite footprint: ${CLI.replace(`${repoRoot}/`, "")}, Node ${process.version}, NODE_OPTIONS=${IMAGE_NODE_OPTIONS}, ${execFileSync("bpftrace", ["--version"], { encoding: "utf8" }).trim()}, kernel ${os.release()}, ${os.availableParallelism()} CPUs`);
    console.log(`target pid ${target.process.pid} -> apiserver ${apiserver}; listeners: /metrics, OTLP/HTTP, OTLP/gRPC (as the DaemonSet); ${opts.kubernetes ? "the mix with --kubernetes (a real kube-apiserver)" : "no --kubernetes"}`);
    if (!opts.single) {
      process.stderr.write("mix: building the Go operators\n");
      const binaries = await buildMixBinaries(dir);
      let kubernetesArgs: string[] = [];
      if (opts.kubernetes) {
        const started = Date.now();
        const controlPlane = await startControlPlane({ log: (line) => process.stderr.write(`control plane: ${line}\n`) });
        stops.push(() => controlPlane.stop());
        process.stderr.write(`control plane: ready after ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
        kubernetesArgs = ["--kubernetes", "--kubeconfig", controlPlane.adminKubeconfigPath, "--node-name", "footprint-node"];
      }
      const builds: AgentBuild[] = [...(opts.baseline === null ? [] : [baselineBuild(opts.baseline)]), { label: "this checkout", cli: CLI }];
      const runs: [AgentBuild, MixResult[], string][] = [];
      for (const build of builds) {
        const agentDir = mkdtempSync(path.join(dir, "agent-"));
        runs.push([build, await measureMix(opts, agentDir, binaries, build, kubernetesArgs), agentDir]);
      }
      const floor = opts.floor ? await measureFloor(opts) : null;
      for (const [build, mix] of runs) for (const { step, rows } of mix) printRows(`the mix (${build.label}): ${step}`, rows, opts);
      if (floor) printRows("floor: an idle Node and an empty bpftrace program, what no agent can go below", floor, opts);
      for (const [build, mix, agentDir] of runs) {
        printMix(build.label, mix, floor);
        printHeap("sockets", agentDir);
      }
      if (runs.length === 2) printSideBySide(runs[0]![0].label, runs[0]![1], runs[1]![1]);
      return;
    }
    const results: [string, Row[]][] = [];
    for (const variant of opts.variants) results.push([variant, await measureVariant(variant, opts, target, apiserver, dir)]);
    const floor = opts.floor ? await measureFloor(opts) : null;
    for (const [variant, rows] of results) printRows(`--probe-variant ${variant}, the target sending ${opts.sends}/s`, rows, opts);
    if (floor) printRows("floor: an idle Node and an empty bpftrace program, what no agent can go below", floor, opts);
    for (const [variant] of results) printHeap(variant, dir);
  } finally {
    for (const p of processes) p.kill();
    for (const stop of stops) await stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(`bench:footprint: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
});
