// `npm run bench`: what the agent's probes cost the processes of the node, in
// added nanoseconds per operation, measured on this kernel. Not a test: it
// prints numbers, for the closing notes of the issues that change the probes.
//
// USAGE: npm run bench -- [--rounds N] [--iterations N] [--cpu N]   (root, bpftrace, gcc)
//
// WHAT RUNS. Timed loops in C (probeCostLoop.c, compiled at start), so the
// cost measured is the kernel's, not a runtime's:
//   - a target process sending 100-byte messages (send(), TCP_NODELAY as Go
//     sets it) to a loopback server that the agent knows as an apiserver;
//   - the server's reader of that connection, a non-target: CPU ns per recv();
//   - a non-target process doing the same sends to the same server;
//   - a non-target process doing 100-byte write()s to a file in a temp dir.
// All loops and the server run pinned to one CPU (why: probeCostLoop.c).
// The loops start before any agent (the target's connection predates the
// agent, as client-go's does) and run once per phase on a line on stdin.
//
// CONFIGURATIONS, one phase each per round, in an order rotated every round:
// no probe; the real agent CLI with --probe-variant sockets; the same with
// --probe-variant syscalls. An agent is started for its phase, measured once
// /readyz says its probe is attached, and stopped (bpftrace gone) before the
// next phase. After each agent phase the agent's own /metrics must show the
// target's sends, so the measured path is the one the probe filters in.
//
// HOW TO READ. Each loop reports ns/op on two clocks: wall (CLOCK_MONOTONIC,
// what the caller waits) and CPU (the calling thread's CPU clock, where a
// tracepoint's program runs, blind to the time other processes had the CPU).
// On a shared, loaded machine the CPU column is the steadier one. A phase
// keeps the fastest of its runs; the table gives, per operation and
// configuration, the median over rounds, the range, and the added ns and
// ratio against "no probe", each the median of per-round pairs (the load
// drifts between rounds). Below the table: whether the agent counted the
// target's sends, how much CPU the agent itself used while the loops ran (on
// 2 CPUs that is contention the loops feel too), and any other bpftrace that
// ran on the machine during a phase. Such a bpftrace adds its own probes'
// cost, so a phase first waits a while for it to finish, and a round in which
// one ran anyway is left out of the table when at least one round was clean.
// Last, per configuration, each BPF program's own run time from the kernel
// (kernel.bpf_stats_enabled, on while the bench runs): how often it ran in a
// phase and its ns per run — where the added nanoseconds go.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { attachedBpftracePids, descendants, sleep, startAgentRun, type AgentRun } from "./agentRun.ts";
import { enableBpfStats, programStats } from "./bpfProgramStats.ts";
import { CostTable, median, type Sample } from "./costTable.ts";
import { compileLoops, FileLoop, SendLoop, startServer, type LineProcess } from "./loopProcesses.ts";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

const USAGE = `usage: npm run bench -- [--rounds N] [--iterations N] [--cpu N]

  --rounds N       phases per configuration, interleaved (default 3)
  --iterations N   operations per timed run (default 50000)
  --cpu N          the CPU every loop runs on (default: the last one)

Needs root, bpftrace and gcc.`;

/** Lets the agent's own start-up work (first target scan, first tick) finish before timing. */
const SETTLE_MS = 500;
/** Timed runs of each loop per phase; the fastest is kept. */
const RUNS_PER_PHASE = 3;
/** How long, over the whole run, phases may wait for someone else's bpftrace to finish. */
const QUIET_WAIT_BUDGET_MS = 30_000;
/** The probe's counts reach /metrics on its 1 s tick. */
const COUNT_WAIT_MS = 3000;

const CONFIGURATIONS = [
  { key: "none", label: "no probe", variant: null },
  { key: "sockets", label: "agent: sockets", variant: "sockets" },
  { key: "syscalls", label: "agent: syscalls", variant: "syscalls" },
] as const;

const OPERATIONS = [
  { key: "targetSend", label: "target send() 100 B, apiserver socket" },
  { key: "apiserverRecv", label: "its reader: recv() 100 B, CPU ns" },
  { key: "otherSend", label: "non-target send() 100 B, same server" },
  { key: "otherFile", label: "non-target write() 100 B, file" },
];

function parseOptions(argv: string[]): { rounds: number; iterations: number; cpu: number } {
  let values: { rounds?: string; iterations?: string; cpu?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: { rounds: { type: "string" }, iterations: { type: "string" }, cpu: { type: "string" }, help: { type: "boolean", short: "h" } },
      strict: true,
    }));
  } catch (err) {
    process.stderr.write(`bench: ${(err as Error).message}\n${USAGE}\n`);
    process.exit(2);
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  const positive = (name: string, value: string | undefined, fallback: number): number => {
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) {
      process.stderr.write(`bench: --${name} must be a positive integer, got ${JSON.stringify(value)}\n`);
      process.exit(2);
    }
    return n;
  };
  const cpus = os.availableParallelism();
  let cpu = cpus - 1;
  if (values.cpu !== undefined) {
    cpu = Number(values.cpu);
    if (!Number.isInteger(cpu) || cpu < 0 || cpu >= cpus) {
      process.stderr.write(`bench: --cpu must be a CPU number from 0 to ${cpus - 1}, got ${JSON.stringify(values.cpu)}\n`);
      process.exit(2);
    }
  }
  return { rounds: positive("rounds", values.rounds, 3), iterations: positive("iterations", values.iterations, 50_000), cpu };
}

/** The smallest sample seen on each clock. */
function fastest(): { add(sample: Sample): void; readonly value: Sample } {
  let wallNs: number | null = null;
  let cpuNs = Infinity;
  return {
    add(sample) {
      if (sample.wallNs !== null) wallNs = Math.min(wallNs ?? Infinity, sample.wallNs);
      cpuNs = Math.min(cpuNs, sample.cpuNs);
    },
    get value() {
      return { wallNs, cpuNs };
    },
  };
}

/** Waits (at most budgetMs) until no other bpftrace runs; returns the ms waited. */
async function waitForQuiet(budgetMs: number): Promise<number> {
  const started = Date.now();
  let pids = attachedBpftracePids();
  if (pids.length === 0 || budgetMs <= 0) return 0;
  process.stderr.write(`waiting for other bpftrace processes (pid ${pids.join(", ")}) to finish, at most ${(budgetMs / 1000).toFixed(0)} s\n`);
  while (pids.length > 0 && Date.now() - started < budgetMs) {
    await sleep(250);
    pids = attachedBpftracePids();
  }
  return Date.now() - started;
}

function missingRequirements(): string[] {
  const missing: string[] = [];
  if (process.getuid?.() !== 0) missing.push("not root (bpftrace loads BPF programs)");
  for (const [tool, hint] of [
    ["bpftrace", "apt-get install bpftrace"],
    ["gcc", "apt-get install gcc"],
  ]) {
    try {
      execFileSync(tool!, ["--version"], { stdio: "ignore" });
    } catch {
      missing.push(`${tool} not on PATH (${hint})`);
    }
  }
  // Only root can look into tracefs: for anyone else it would look unmounted.
  if (process.getuid?.() === 0 && !existsSync("/sys/kernel/tracing/events")) missing.push("tracefs not mounted (mount -t tracefs nodev /sys/kernel/tracing)");
  return missing;
}

function commandLine(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return "unknown";
  }
}

function machineDescription(): string[] {
  const cpu = /^model name\s*:\s*(.+)$/m.exec(readFileSync("/proc/cpuinfo", "utf8"))?.[1] ?? "unknown";
  const probeHash = (file: string): string =>
    createHash("sha256").update(readFileSync(path.join(repoRoot, "probes", file))).digest("hex").slice(0, 12);
  const dirty = commandLine("git", ["-C", repoRoot, "status", "--porcelain", "--", "probes", "agent/src"]) ? " (probes or agent/src modified)" : "";
  return [
    `machine:  ${os.availableParallelism()} CPUs (nproc), ${cpu}`,
    `kernel:   ${os.release()}`,
    `bpftrace: ${commandLine("bpftrace", ["--version"])}`,
    `node:     ${process.version}`,
    `commit:   ${commandLine("git", ["-C", repoRoot, "rev-parse", "--short", "HEAD"])}${dirty}`,
    `probes:   apiserver_sockets.bt ${probeHash("apiserver_sockets.bt")}, apiserver_syscalls.bt ${probeHash("apiserver_syscalls.bt")} (sha256)`,
    `load:     ${os.loadavg().map((l) => l.toFixed(2)).join(" ")} (1/5/15 min, at start)`,
  ];
}

async function main(): Promise<void> {
  const { rounds, iterations, cpu } = parseOptions(process.argv.slice(2));
  const missing = missingRequirements();
  if (missing.length > 0) {
    process.stderr.write(`bench: cannot measure probe cost here: ${missing.join("; ")}\n`);
    process.exit(1);
  }

  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-bench-"));
  const children: LineProcess[] = [];
  let agent: AgentRun | null = null;
  let interrupted = false;
  const restoreBpfStats = enableBpfStats();
  const teardown = async (): Promise<void> => {
    restoreBpfStats();
    const running = agent;
    agent = null;
    await running?.stop();
    for (const child of children) child.kill();
    rmSync(dir, { recursive: true, force: true });
  };
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => {
      interrupted = true;
      process.stderr.write(`\nbench: ${signal}, stopping the agent and the loops\n`);
      teardown().then(
        () => process.exit(130),
        () => process.exit(130),
      );
    });
  }

  const started = Date.now();
  try {
    const binary = compileLoops(dir);
    const server = await startServer(binary, cpu);
    children.push(server.process);
    const target = new SendLoop("target send loop", binary, server.port, cpu);
    const other = new SendLoop("non-target send loop", binary, server.port, cpu);
    const file = new FileLoop(binary, path.join(dir, "writes.dat"), cpu);
    children.push(target.process, other.process, file.process);
    await Promise.all([target.ready(), other.ready(), file.ready()]);
    const apiserver = `127.0.0.1:${server.port}`;
    // Per run: timed sends, warm-up sends, the run header.
    const expectedCount = RUNS_PER_PHASE * (iterations + Math.floor(iterations / 10) + 1);

    const out = (line = ""): void => void process.stdout.write(`${line}\n`);
    out("lostwrite probe cost");
    for (const line of machineDescription()) out(line);
    out(`setup:    ${rounds} rounds × ${CONFIGURATIONS.length} configurations, ${iterations} operations per timed run, the fastest of ${RUNS_PER_PHASE} runs per phase;`);
    out(`          every loop and the server's readers on CPU ${cpu}; the agent wherever the scheduler puts it;`);
    out(`          target pid ${target.process.pid}, apiserver ${apiserver} (loopback), non-target pids ${other.process.pid} (send), ${file.process.pid} (file)`);
    out();

    const table = new CostTable(OPERATIONS, [...CONFIGURATIONS], "none");
    const counted = new Map<string, number[]>();
    const foreign: string[] = [];
    const restarted: string[] = [];
    const contaminated = new Set<number>();
    let quietBudgetMs = QUIET_WAIT_BUDGET_MS;
    const agentCpu = new Map<string, number[]>();
    /** configuration → program name → per phase: runs, ns per run. */
    const programCost = new Map<string, Map<string, { runs: number[]; nsPerRun: number[] }>>();
    const phases = rounds * CONFIGURATIONS.length;
    let phase = 0;

    for (let round = 0; round < rounds; round++) {
      for (let i = 0; i < CONFIGURATIONS.length; i++) {
        const config = CONFIGURATIONS[(round + i) % CONFIGURATIONS.length]!;
        phase++;
        if (interrupted) return;
        quietBudgetMs -= await waitForQuiet(quietBudgetMs);
        const phaseStarted = Date.now();
        if (config.variant) agent = await startAgentRun({ targetPid: target.process.pid, apiserver, variant: config.variant });
        const running = agent;
        const startup = (Date.now() - phaseStarted) / 1000;
        // Ours are whatever bpftrace the agent runs now (also after a restart).
        const others = (): number[] => {
          const ours = new Set([...(running?.bpftrace ?? []), ...(running ? descendants(running.child.pid ?? -1) : [])]);
          return attachedBpftracePids().filter((pid) => !ours.has(pid));
        };
        const othersBefore = others();
        await sleep(SETTLE_MS);
        const timedFrom = Date.now();
        const agentCpuFrom = running?.cpuSeconds() ?? 0;

        // Several short runs per phase, the fastest kept on each clock: on a
        // shared machine noise only ever adds time.
        const targetSend = fastest();
        const apiserverRecv = fastest();
        const otherSend = fastest();
        const otherFile = fastest();
        for (let run = 0; run < RUNS_PER_PHASE; run++) {
          const sent = await target.run(iterations);
          targetSend.add(sent.send);
          apiserverRecv.add({ wallNs: null, cpuNs: sent.recvCpuNs });
          otherSend.add((await other.run(iterations)).send);
          otherFile.add(await file.run(iterations));
        }
        table.record("targetSend", config.key, round, targetSend.value);
        table.record("apiserverRecv", config.key, round, apiserverRecv.value);
        table.record("otherSend", config.key, round, otherSend.value);
        table.record("otherFile", config.key, round, otherFile.value);

        // What the agent itself (Node and bpftrace) took of the machine while the loops ran.
        const agentCpuShare = running ? (running.cpuSeconds() - agentCpuFrom) / ((Date.now() - timedFrom) / 1000) : 0;
        const othersDuring = [...new Set([...othersBefore, ...others()])];
        if (othersDuring.length > 0) {
          foreign.push(`round ${round + 1} ${config.label}: bpftrace pid ${othersDuring.join(", ")}`);
          contaminated.add(round);
        }

        let note = "";
        if (running) {
          let seen = 0;
          const deadline = Date.now() + COUNT_WAIT_MS;
          while ((seen = await running.countedWrites()) < expectedCount && Date.now() < deadline) await sleep(200);
          counted.set(config.key, [...(counted.get(config.key) ?? []), seen]);
          for (const program of programStats(running.bpftrace)) {
            const byName = programCost.get(config.key) ?? new Map<string, { runs: number[]; nsPerRun: number[] }>();
            programCost.set(config.key, byName);
            const entry = byName.get(program.name) ?? { runs: [], nsPerRun: [] };
            byName.set(program.name, entry);
            entry.runs.push(program.runs);
            if (program.runs > 0) entry.nsPerRun.push(program.runTimeNs / program.runs);
          }
          const restarts = await running.restarts();
          if (restarts > 0) restarted.push(`round ${round + 1} ${config.label}: ${restarts}`);
          agentCpu.set(config.key, [...(agentCpu.get(config.key) ?? []), agentCpuShare]);
          note = `; agent ready in ${startup.toFixed(1)} s, used ${(agentCpuShare * 100).toFixed(0)} % of a CPU, counted ${seen}/${expectedCount} target sends${restarts > 0 ? `, restarted bpftrace ${restarts}×` : ""}`;
          agent = null;
          await running.stop();
        }
        const show = (s: Sample): string => `${s.wallNs === null ? "" : `${s.wallNs.toFixed(0)}/`}${s.cpuNs.toFixed(0)}`;
        process.stderr.write(
          `[${phase}/${phases}] round ${round + 1} ${config.label.padEnd(15)} wall/CPU ns: send ${show(targetSend.value)} ` +
            `recv ${show(apiserverRecv.value)} other send ${show(otherSend.value)} file ${show(otherFile.value)}${note}\n`,
        );
      }
    }

    if (interrupted) return;
    // Rounds in which someone else's bpftrace ran are left out when any round was clean.
    const clean = new Set([...Array(rounds).keys()].filter((round) => !contaminated.has(round)));
    const used = clean.size > 0 ? clean : new Set(Array(rounds).keys());
    out(table.render(used));
    out();
    out(
      clean.size === rounds
        ? `rounds:   all ${rounds} rounds used`
        : clean.size > 0
          ? `rounds:   ${clean.size} of ${rounds} used; left out, because another bpftrace ran in them: ${[...contaminated].map((r) => r + 1).join(", ")}`
          : `rounds:   all ${rounds} used, but another bpftrace ran in every round: the numbers include its cost`,
    );
    for (const config of CONFIGURATIONS) {
      const seen = counted.get(config.key);
      if (!seen) continue;
      const short = seen.filter((n) => n < expectedCount).length;
      out(
        short === 0
          ? `check:    ${config.label}: the agent counted all ${expectedCount} target sends (timed, warm-up, header) in every round`
          : `check:    ${config.label}: the agent counted fewer than ${expectedCount} target sends in ${short} of ${seen.length} rounds (${seen.join(", ")}): the target path was not measured there`,
      );
    }
    for (const config of CONFIGURATIONS) {
      const shares = agentCpu.get(config.key);
      if (shares) out(`agent:    ${config.label}: the agent and its bpftrace used ${(median(shares) * 100).toFixed(1)} % of one CPU (median) while the loops ran`);
    }
    out(
      foreign.length === 0
        ? "check:    no other bpftrace ran on the machine during any phase"
        : `note:     other bpftrace processes ran during ${foreign.length} of ${phases} phases:\n          ${foreign.join("\n          ")}`,
    );
    if (restarted.length > 0) out(`warning:  the agent restarted bpftrace during a phase (probe briefly detached): ${restarted.join("; ")}`);
    out();
    out("BPF programs' own run time (kernel.bpf_stats_enabled), median over phases; the probe's entry and exit come on top");
    out(`${"configuration".padEnd(17)}${"program".padEnd(17)}${"runs/phase".padStart(12)}${"ns/run".padStart(9)}`);
    for (const config of CONFIGURATIONS) {
      for (const [name, { runs, nsPerRun }] of [...(programCost.get(config.key) ?? [])].sort(([a], [b]) => a.localeCompare(b))) {
        out(`${config.label.padEnd(17)}${name.padEnd(17)}${median(runs).toFixed(0).padStart(12)}${(nsPerRun.length ? median(nsPerRun).toFixed(0) : "—").padStart(9)}`);
      }
    }
    out(`load:     ${os.loadavg().map((l) => l.toFixed(2)).join(" ")} (1/5/15 min, at end); took ${((Date.now() - started) / 1000).toFixed(0)} s`);
  } catch (err) {
    if (interrupted) return;
    process.stderr.write(`bench: ${(err as Error).message}\n`);
    process.exitCode = 1;
  } finally {
    if (!interrupted) await teardown();
  }
}

await main();
