// `npm run bench:go`: what the Go HTTP/2 probe costs the operator it follows,
// in added CPU nanoseconds per request, measured side by side in one run.
//
// USAGE: npm run bench:go -- [--rounds N] [--requests N]   (root, bpftrace, go)
//
// WHAT RUNS. go-request-loop (agent/bench/go-request-loop, built here): a
// server process answering HTTP/2 over TLS on loopback, and a client that
// keeps one golang.org/x/net/http2 connection, as client-go does, and sends
// status PATCHes one after the other. Per round, in an order rotated every
// round: the client alone; the client with the Go probe program lostwrite
// renders for its binary (uprobes on its functions, filtered to its pid) —
// for this stripped binary, past each function's stack check; and the same
// program with its uprobes at the function entries, where they go in a
// binary with symbols (see stackCheckPrologue.ts for why the two differ);
// and the first program following no process: what every process running a
// probed binary pays when the agent does not follow it (the traps, and the
// one map lookup that sends them away).
// The client's CPU time is its whole process's (getrusage: a uprobe's cost is
// charged to whichever thread hit it); the server's is read from /proc, to
// show that a process the probe does not follow pays nothing. In each probe
// phase the probe must have printed a line for every request, so the
// measured path is the probed one. Also printed: how long bpftrace took to
// compile and attach the program, and its resident memory once attached.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { buildGo } from "../../testbed/goBuild.ts";
import { inspectGoBinary } from "../src/sources/goBinary/inspectGoBinary.ts";
import { GO_PROBE_ENV, renderGoProgram } from "../src/sources/goHttp2/goProbeProgram.ts";
import { bpftraceEnv } from "../src/sources/probe/probeProgram.ts";
import { median } from "./costTable.ts";
import { LineProcess } from "./loopProcesses.ts";
import { positiveOption } from "./positiveOption.ts";

const here = path.dirname(fileURLToPath(import.meta.url));
/** Timed runs per phase; the fastest is kept. */
const RUNS_PER_PHASE = 3;

function options(): { rounds: number; requests: number } {
  const { values } = parseArgs({ options: { rounds: { type: "string" }, requests: { type: "string" } }, strict: true });
  return { rounds: positiveOption("rounds", values.rounds, 5), requests: positiveOption("requests", values.requests, 5000) };
}

/** utime + stime of a process, ns (clock ticks of 10 ms: read over many requests). */
function processCpuNs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  const ticks = Number(fields[11]) + Number(fields[12]);
  return (ticks * 1e9) / 100;
}

function residentKib(pid: number): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN);
}

interface Probe {
  attachMs: number;
  rssKib: number;
  requestLines: () => number;
  stop: () => Promise<void>;
}

/** Runs the Go program for `pid` and resolves once it has attached (its hello line). */
function startProbe(program: string, dir: string): Promise<Probe> {
  const file = path.join(dir, "go-probe.bt");
  writeFileSync(file, program);
  const started = Date.now();
  const child = spawn("bpftrace", ["-f", "json", "--unsafe", file, "0"], { stdio: ["ignore", "pipe", "ignore"], env: { ...process.env, ...bpftraceEnv(), ...GO_PROBE_ENV } });
  let requests = 0;
  let buffered = "";
  return new Promise((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`bpftrace exited (${code}) before attaching`)));
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      buffered += chunk;
      const lines = buffered.split("\n");
      buffered = lines.pop()!;
      for (const line of lines) {
        if (line.includes('"go_request ')) requests++;
        if (line.includes('"hello ')) {
          resolve({
            attachMs: Date.now() - started,
            rssKib: residentKib(child.pid!),
            requestLines: () => requests,
            stop: () => new Promise((done) => {
              child.removeAllListeners("exit");
              child.once("exit", () => done());
              child.kill("SIGINT");
            }),
          });
        }
      }
    });
  });
}

async function main(): Promise<void> {
  const { rounds, requests } = options();
  if (process.getuid?.() !== 0) throw new Error("needs root (bpftrace loads BPF programs)");
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-bench-go-"));
  const binary = await buildGo({ source: path.join(here, "go-request-loop"), workDir: path.join(dir, "src"), out: path.join(dir, "go-request-loop"), flags: ["-ldflags=-s -w"] });
  const server = new LineProcess("server", binary, ["server"]);
  const port = Number(await server.nextLine());
  const client = new LineProcess("client", binary, ["client", `https://127.0.0.1:${port}/apis/demo.lostwrite.dev/v1/namespaces/bench/widgets/w1/status`]);
  try {
    await client.nextLine(); // "ready PID": its connection is open
    const inspected = await inspectGoBinary(`/proc/${client.pid}/exe`);
    if (!inspected.ok) throw new Error(`cannot probe the bench client: ${inspected.reason}`);
    const binaryPath = `/proc/${client.pid}/exe`;
    const atEntries = inspected.families.map((f) => ({
      ...f,
      functions: Object.fromEntries(Object.entries(f.functions).map(([fn, l]) => [fn, { ...l, probeOffset: l.fileOffset }])) as typeof f.functions,
    }));
    const programs = {
      probe: renderGoProgram({ binary: binaryPath, families: inspected.families, programId: 0, pids: [client.pid], execWatch: false }),
      entry: renderGoProgram({ binary: binaryPath, families: atEntries, programId: 0, pids: [client.pid], execWatch: false }),
      unfollowed: renderGoProgram({ binary: binaryPath, families: inspected.families, programId: 0, pids: [], execWatch: false }),
    };
    type Phase = "none" | keyof typeof programs;
    const phases: Phase[] = inspected.probePlacement === "entry" ? ["none", "probe", "unfollowed"] : ["none", "probe", "entry", "unfollowed"];

    const cost = { none: [] as number[], probe: [] as number[], entry: [] as number[], unfollowed: [] as number[] };
    const wall = { none: [] as number[], probe: [] as number[], entry: [] as number[], unfollowed: [] as number[] };
    const serverCost = { none: [] as number[], probe: [] as number[], entry: [] as number[], unfollowed: [] as number[] };
    const attach: number[] = [];
    const rss: number[] = [];
    const measure = async (phase: Phase): Promise<void> => {
      let best = { cpu: Infinity, wall: Infinity, server: Infinity };
      for (let run = 0; run < RUNS_PER_PHASE; run++) {
        const serverBefore = processCpuNs(server.pid);
        const [cpuNs, wallNs] = (await client.request(String(requests))).split(" ").map(Number) as [number, number];
        const serverNs = (processCpuNs(server.pid) - serverBefore) / requests;
        if (cpuNs < best.cpu) best = { cpu: cpuNs, wall: wallNs, server: serverNs };
      }
      cost[phase].push(best.cpu);
      wall[phase].push(best.wall);
      serverCost[phase].push(best.server);
    };
    for (let round = 0; round < rounds; round++) {
      // Rotated every round, so that no phase always runs first or last.
      for (const phase of phases.map((_, i) => phases[(i + round) % phases.length]!)) {
        if (phase === "none") {
          await measure("none");
          continue;
        }
        const probe = await startProbe(programs[phase], dir);
        if (phase === "probe") {
          attach.push(probe.attachMs);
          rss.push(probe.rssKib);
        }
        await measure(phase);
        await new Promise((r) => setTimeout(r, 300)); // the last lines out of the perf buffers
        const seen = probe.requestLines();
        await probe.stop();
        if (phase === "unfollowed" && seen > 0) throw new Error(`a program following no process printed ${seen} requests`);
        if (phase !== "unfollowed" && seen < requests * RUNS_PER_PHASE) throw new Error(`the probe saw ${seen} of ${requests * RUNS_PER_PHASE} requests: not the probed path`);
      }
    }
    const added = (phase: Exclude<Phase, "none">): number[] => cost[phase].map((ns, i) => ns - cost.none[i]!);
    const row = (label: string, values: number[]): string => `${label.padEnd(44)} ${median(values).toFixed(0).padStart(8)}   (${Math.min(...values).toFixed(0)}–${Math.max(...values).toFixed(0)})`;
    console.log(`Go HTTP/2 request cost: ${rounds} rounds × ${RUNS_PER_PHASE} runs × ${requests} sequential status PATCHes, one connection`);
    console.log(`kernel ${os.release()}, ${execFileSync("bpftrace", ["--version"], { encoding: "utf8" }).trim()}, ${inspected.goVersion}, x/net ${inspected.xNet?.version ?? "?"}, ${inspected.families.map((f) => f.name).join(" + ")} probed, uprobes at: ${inspected.probePlacement}`);
    console.log("                                               median   (range)");
    console.log(row("client CPU ns/request, no probe", cost.none));
    console.log(row("client CPU ns/request, Go probe attached", cost.probe));
    console.log(row("  added CPU ns/request (per-round pairs)", added("probe")));
    console.log(`  ratio                                          ${(median(cost.probe) / median(cost.none)).toFixed(3)}`);
    if (phases.includes("entry")) {
      console.log(row("client CPU ns/request, probes at entries", cost.entry));
      console.log(row("  added CPU ns/request (per-round pairs)", added("entry")));
      console.log(`  ratio                                          ${(median(cost.entry) / median(cost.none)).toFixed(3)}`);
    }
    console.log(row("client CPU ns/request, program, client not followed", cost.unfollowed));
    console.log(row("  added CPU ns/request (per-round pairs)", added("unfollowed")));
    console.log(row("client wall ns/request, no probe", wall.none));
    console.log(row("client wall ns/request, Go probe attached", wall.probe));
    console.log(row("server CPU ns/request, no probe", serverCost.none));
    console.log(row("server CPU ns/request, Go probe attached", serverCost.probe));
    console.log(row("probe compile + attach, ms", attach));
    console.log(row("bpftrace resident memory, KiB", rss));
  } finally {
    client.kill();
    server.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`bench:go: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
