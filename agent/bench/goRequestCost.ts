// `npm run bench:go`: what the Go HTTP/2 probe costs the operator it follows,
// in added CPU nanoseconds per request, measured side by side in one run.
//
// USAGE: npm run bench:go -- [--rounds N] [--requests N] [--compare TREE]
//        (root, bpftrace, go)
//
// WHAT RUNS. go-request-loop (agent/bench/go-request-loop, built here twice:
// stripped with -s -w, as most operator images ship, and with its symbol
// table, as kubebuilder's Dockerfile builds a manager): a server process
// answering HTTP/2 over TLS on loopback, and one client of each build that
// keeps one golang.org/x/net/http2 connection, as client-go does, and sends
// status PATCHes one after the other. Per round, in an order rotated every
// round: each client alone; each client with the Go probe program lostwrite
// renders for its binary (uprobes on its functions, filtered to its pid) —
// past each function's stack check in both: by file offset in the stripped
// one, by the names a debug file gives the jumps in the one with symbols
// (probeSymbolFile.ts); the client with symbols probed at the function
// entries, where its probes go when that debug file cannot be written (see
// stackCheckPrologue.ts for why the two differ); and the stripped client's
// program following no process: what every process running a probed binary
// pays when the agent does not follow it (the traps, and the one map lookup
// that sends them away). Each probe phase's added cost is paired with its own
// client's run alone in the same round.
// The client's CPU time is its whole process's (getrusage: a uprobe's cost is
// charged to whichever thread hit it); the server's is read from /proc, to
// show that a process the probe does not follow pays nothing. In each probe
// phase the probe must have seen every request (printed it, or counted it in
// the kernel: @go_sent), so the measured path is the probed one. Also
// printed: uprobe hits and go_* lines printed per request (the program counts
// the hits), how long bpftrace took to compile and attach the
// program, and its resident memory once attached. With --compare TREE
// (another checkout of lostwrite, e.g. a git worktree of main), the program
// TREE renders for each probed client past the stack check runs as two more
// phases of the same rounds: a change to the program measured side by side
// with the one before it.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { buildGo } from "../../testbed/goBuild.ts";
import { inspectGoBinary, type GoBinaryInspected, type ProbePlacement } from "../src/sources/goBinary/inspectGoBinary.ts";
import { probeSymbolsOf, removeProbeSymbols, writeProbeSymbols } from "../src/sources/goBinary/probeSymbolFile.ts";
import { GO_PROBE_ENV, renderGoProgram } from "../src/sources/goHttp2/goProbeProgram.ts";
import { bpftraceEnv, kernelBtf } from "../src/sources/probe/probeProgram.ts";
import { median } from "./costTable.ts";
import { LineProcess } from "./loopProcesses.ts";
import { positiveOption } from "./positiveOption.ts";

const here = path.dirname(fileURLToPath(import.meta.url));
/** Timed runs per phase; the fastest is kept. */
const RUNS_PER_PHASE = 3;

function options(): { rounds: number; requests: number; compare: string | null } {
  const { values } = parseArgs({ options: { rounds: { type: "string" }, requests: { type: "string" }, compare: { type: "string" } }, strict: true });
  return { rounds: positiveOption("rounds", values.rounds, 5), requests: positiveOption("requests", values.requests, 5000), compare: values.compare ?? null };
}

type Render = typeof renderGoProgram;

/** The Go program renderer of another checkout (--compare): its own template, rendered by its own code. */
async function comparedRenderer(tree: string): Promise<Render> {
  const file = path.resolve(tree, "agent/src/sources/goHttp2/goProbeProgram.ts");
  const loaded = (await import(file)) as { renderGoProgram?: Render };
  if (typeof loaded.renderGoProgram !== "function") throw new Error(`--compare ${tree}: ${file} has no renderGoProgram`);
  return loaded.renderGoProgram;
}

/** The running kernel's field offsets the Go program reads at, as the agent has them. */
function kernelOffsets(): Readonly<Record<string, number>> {
  const { offsets } = kernelBtf();
  if (typeof offsets === "string") throw new Error(`cannot render the Go program: ${offsets}`);
  return offsets;
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
  stop: () => Promise<void>;
}

/** Runs a bpftrace program, each line of its output to `onLine`; resolves once it has attached (its hello line). */
function startProbe(program: string, dir: string, onLine: (line: string) => void): Promise<Probe> {
  const file = path.join(dir, "go-probe.bt");
  writeFileSync(file, program);
  const started = Date.now();
  const child = spawn("bpftrace", ["-f", "json", "--unsafe", file, "0"], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...bpftraceEnv(), ...GO_PROBE_ENV } });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr = (stderr + chunk).slice(-2000)));
  let buffered = "";
  return new Promise((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`bpftrace exited (${code}) before attaching: ${stderr.trim()}`)));
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      buffered += chunk;
      const lines = buffered.split("\n");
      buffered = lines.pop()!;
      for (const line of lines) {
        onLine(line);
        if (line.includes('"hello ')) {
          resolve({
            attachMs: Date.now() - started,
            rssKib: residentKib(child.pid!),
            // "close": its last lines (the END block's) are read by then.
            stop: () => new Promise((done) => {
              child.removeAllListeners("exit");
              child.once("close", () => done());
              child.kill("SIGINT");
            }),
          });
        }
      }
    });
  });
}

interface Client {
  process: LineProcess;
  inspected: GoBinaryInspected;
  binaryPath: string;
}

async function startClient(name: string, binary: string, port: number): Promise<Client> {
  const process = new LineProcess(name, binary, ["client", `https://127.0.0.1:${port}/apis/demo.lostwrite.dev/v1/namespaces/bench/widgets/w1/status`]);
  await process.nextLine(); // "ready PID": its connection is open
  const binaryPath = `/proc/${process.pid}/exe`;
  const inspected = await inspectGoBinary(binaryPath);
  if (!inspected.ok) throw new Error(`cannot probe the bench client ${name}: ${inspected.reason}`);
  return { process, inspected, binaryPath };
}

/** Uprobe hits per request, counted by a second program on the same points (its own hits are not in the measured runs). */
async function hitsPerRequest(client: Client, placement: ProbePlacement, dir: string, requests: number): Promise<number> {
  const points = renderGoProgram({ binary: client.binaryPath, families: client.inspected.families, probePlacement: placement, programId: 0, pids: [client.process.pid], execWatch: false, kernelOffsets: kernelOffsets() })
    .split("\n")
    .filter((line) => line.startsWith("uprobe:"))
    .map((line) => line.slice(0, line.indexOf(" /")));
  const counter = `${points.join(",\n")} /pid == ${client.process.pid}/ { @hits = count(); }\nBEGIN { printf("hello 0 0\\n"); }\nEND { print(@hits); clear(@hits); }\n`;
  let hits = 0;
  const probe = await startProbe(counter, dir, (line) => {
    // END's print; bpftrace prints the map again, cleared, as it exits.
    const match = /"@hits": (\d+)/.exec(line);
    if (match) hits = Math.max(hits, Number(match[1]));
  });
  await client.process.request(String(requests));
  await probe.stop();
  return hits / requests;
}

async function main(): Promise<void> {
  const { rounds, requests, compare } = options();
  const renderCompared = compare === null ? null : await comparedRenderer(compare);
  if (process.getuid?.() !== 0) throw new Error("needs root (bpftrace loads BPF programs)");
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-bench-go-"));
  const source = path.join(here, "go-request-loop");
  const stripped = await buildGo({ source, workDir: path.join(dir, "src-stripped"), out: path.join(dir, "go-request-loop"), flags: ["-ldflags=-s -w"] });
  const withSymbols = await buildGo({ source, workDir: path.join(dir, "src-symbols"), out: path.join(dir, "go-request-loop-symbols") });
  const server = new LineProcess("server", stripped, ["server"]);
  const port = Number(await server.nextLine());
  const clients: Client[] = [];
  const symbolFiles: string[] = [];
  try {
    const strip = await startClient("stripped client", stripped, port);
    clients.push(strip);
    const sym = await startClient("client with symbols", withSymbols, port);
    clients.push(sym);
    if (strip.inspected.probePlacement !== "stack check branch") throw new Error(`the stripped client is probed at ${strip.inspected.probePlacement}`);
    if (sym.inspected.probePlacement !== "entry" || sym.inspected.buildId === null) throw new Error("the client with symbols has no symbol table or no GNU build id");
    const written = writeProbeSymbols(sym.inspected.buildId, probeSymbolsOf(sym.inspected.families));
    if (!("file" in written)) throw new Error(`cannot name the probe points of the client with symbols: ${written.reason}`);
    symbolFiles.push(written.file);

    const render = (client: Client, placement: ProbePlacement, pids: number[], renderer: Render = renderGoProgram): string =>
      renderer({ binary: client.binaryPath, families: client.inspected.families, probePlacement: placement, programId: 0, pids, execWatch: false, kernelOffsets: kernelOffsets() });
    type Phase = "none" | "probe" | "symbolsNone" | "symbols" | "entry" | "unfollowed" | "probeCompared" | "symbolsCompared";
    const phases: Partial<Record<Phase, { label: string; client: Client; program: string | null; baseline: Phase | null }>> = {
      none: { label: "stripped, no probe", client: strip, program: null, baseline: null },
      probe: { label: "stripped, probed past the stack check", client: strip, program: render(strip, "stack check branch", [strip.process.pid]), baseline: "none" },
      symbolsNone: { label: "with symbols, no probe", client: sym, program: null, baseline: null },
      symbols: { label: "with symbols, probed past the stack check (named)", client: sym, program: render(sym, "named branch", [sym.process.pid]), baseline: "symbolsNone" },
      entry: { label: "with symbols, probed at the entries", client: sym, program: render(sym, "entry", [sym.process.pid]), baseline: "symbolsNone" },
      unfollowed: { label: "stripped, program following no process", client: strip, program: render(strip, "stack check branch", []), baseline: "none" },
      ...(renderCompared === null
        ? {}
        : {
            probeCompared: { label: `stripped, past the stack check, ${compare}'s program`, client: strip, program: render(strip, "stack check branch", [strip.process.pid], renderCompared), baseline: "none" },
            symbolsCompared: { label: `with symbols, named, ${compare}'s program`, client: sym, program: render(sym, "named branch", [sym.process.pid], renderCompared), baseline: "symbolsNone" },
          }),
    };
    const order = Object.keys(phases) as Phase[];
    const phaseOf = (phase: Phase) => phases[phase]!;
    const empty = (): Record<Phase, number[]> => Object.fromEntries(order.map((phase) => [phase, []])) as unknown as Record<Phase, number[]>;
    const cost = empty();
    const wall = empty();
    const serverCost = empty();
    const attach: number[] = [];
    const rss: number[] = [];
    const lostLines = Object.fromEntries(order.map((phase) => [phase, 0])) as Record<Phase, number>;
    const goLines = Object.fromEntries(order.map((phase) => [phase, 0])) as Record<Phase, number>;
    const measure = async (phase: Phase): Promise<void> => {
      let best = { cpu: Infinity, wall: Infinity, server: Infinity };
      for (let run = 0; run < RUNS_PER_PHASE; run++) {
        const serverBefore = processCpuNs(server.pid);
        const [cpuNs, wallNs] = (await phaseOf(phase).client.process.request(String(requests))).split(" ").map(Number) as [number, number];
        const serverNs = (processCpuNs(server.pid) - serverBefore) / requests;
        if (cpuNs < best.cpu) best = { cpu: cpuNs, wall: wallNs, server: serverNs };
      }
      cost[phase].push(best.cpu);
      wall[phase].push(best.wall);
      serverCost[phase].push(best.server);
    };
    const hits = {
      probe: await hitsPerRequest(strip, "stack check branch", dir, 200),
      symbols: await hitsPerRequest(sym, "named branch", dir, 200),
      entry: await hitsPerRequest(sym, "entry", dir, 200),
    };
    for (let round = 0; round < rounds; round++) {
      // Rotated every round, so that no phase always runs first or last.
      for (const phase of order.map((_, i) => order[(i + round) % order.length]!)) {
        const { program } = phaseOf(phase);
        if (program === null) {
          await measure(phase);
          continue;
        }
        // Requests the probe saw: printed (a program before the kernel kept them), or counted in the kernel (@go_sent, printed at its tick).
        let requestLines = 0;
        let kernelCounted = 0;
        let lost = 0;
        const probe = await startProbe(program, dir, (line) => {
          if (line.includes('"go_request ')) requestLines++;
          if (line.includes('"data": "go_')) goLines[phase]++;
          const counted = /"@go_sent": \{([^}]*)\}/.exec(line);
          if (counted) for (const [, n] of counted[1]!.matchAll(/": (\d+)/g)) kernelCounted = Math.max(kernelCounted, Number(n));
          // bpftrace's word that its reader fell behind the perf buffers and lines were dropped.
          const dropped = /"type": "lost_events", "data": \{"events": (\d+)/.exec(line);
          if (dropped) lost += Number(dropped[1]);
        });
        if (phase === "probe") {
          attach.push(probe.attachMs);
          rss.push(probe.rssKib);
        }
        await measure(phase);
        // Fixed, not awaited on a line: the program prints its count at its 1 s tick, and the last lines come out of the perf buffers.
        await new Promise((r) => setTimeout(r, 1300));
        await probe.stop();
        const seen = requestLines + kernelCounted;
        if (phase === "unfollowed" && seen > 0) throw new Error(`a program following no process saw ${seen} requests`);
        // A line bpftrace lost was printed all the same (the probe ran): the probed path, whose cost is measured.
        if (phase !== "unfollowed" && seen + lost < requests * RUNS_PER_PHASE) throw new Error(`${phaseOf(phase).label}: the probe saw ${seen} of ${requests * RUNS_PER_PHASE} requests (${lost} lines lost in its perf buffers): not the probed path`);
        lostLines[phase] += lost;
      }
    }
    const added = (phase: Phase): number[] => cost[phase].map((ns, i) => ns - cost[phaseOf(phase).baseline ?? phase][i]!);
    const row = (label: string, values: number[]): string => `${label.padEnd(58)} ${median(values).toFixed(0).padStart(8)}   (${Math.min(...values).toFixed(0)}–${Math.max(...values).toFixed(0)})`;
    console.log(`Go HTTP/2 request cost: ${rounds} rounds × ${RUNS_PER_PHASE} runs × ${requests} sequential status PATCHes, one connection per client`);
    console.log(`kernel ${os.release()}, ${execFileSync("bpftrace", ["--version"], { encoding: "utf8" }).trim()}, ${strip.inspected.goVersion}, x/net ${strip.inspected.xNet?.version ?? "?"}, ${strip.inspected.families.map((f) => f.name).join(" + ")} probed`);
    console.log("                                                             median   (range)");
    for (const phase of order) {
      const { label, baseline } = phaseOf(phase);
      console.log(row(`client CPU ns/request, ${label}`, cost[phase]));
      if (baseline === null) continue;
      console.log(row("  added CPU ns/request (per-round pairs)", added(phase)));
      console.log(`  ratio                                                        ${(median(cost[phase]) / median(cost[baseline])).toFixed(3)}`);
      if (phase in hits) console.log(`  uprobe hits per request                                      ${hits[phase as keyof typeof hits].toFixed(2)}`);
      console.log(`  go_* lines printed per request                               ${(goLines[phase] / (requests * RUNS_PER_PHASE * rounds)).toFixed(2)}`);
      if (lostLines[phase] > 0) console.log(`  lines bpftrace lost (its reader fell behind)                 ${lostLines[phase]}`);
    }
    console.log(row("client wall ns/request, stripped, no probe", wall.none));
    console.log(row("client wall ns/request, stripped, probed", wall.probe));
    console.log(row("server CPU ns/request, stripped client, no probe", serverCost.none));
    console.log(row("server CPU ns/request, stripped client, probed", serverCost.probe));
    console.log(row("probe compile + attach, ms", attach));
    console.log(row("bpftrace resident memory, KiB", rss));
  } finally {
    for (const client of clients) client.process.kill();
    server.kill();
    for (const file of symbolFiles) removeProbeSymbols(file);
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`bench:go: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
