// `npm run bench`: what the agent's probes cost the processes of the node, in
// added nanoseconds per operation, measured on this kernel, side by side with
// the tools people reach for instead (strace, a bpftrace one-liner) and with
// the floor under any bpftrace probe. Not a test: it prints numbers, for the
// closing notes of the issues that change the probes.
//
// USAGE: npm run bench -- [--rounds N] [--iterations N] [--cpu N] [--configurations a,b,c]
//        (root, bpftrace, gcc; strace for "strace", bpftool for "printf" and "floor")
//
// WHAT RUNS. Timed loops in C (probeCostLoop.c, compiled at start), so the
// cost measured is the kernel's, not a runtime's:
//   - a target process sending 100-byte messages (send(), TCP_NODELAY as Go
//     sets it) to a loopback server that the agent knows as an apiserver;
//   - the server's reader of that connection, a non-target: CPU ns per recv(),
//     and its context switches per 1000 recv() (getrusage RUSAGE_THREAD);
//   - a non-target process doing the same sends to the same server;
//   - a non-target process doing 100-byte write()s to a file in a temp dir.
// All loops and the server run pinned to one CPU (why: probeCostLoop.c).
// The loops start before any probe (the target's connection predates the
// agent, as client-go's does) and run once per phase on a line on stdin.
//
// CONFIGURATIONS (keys for --configurations), one phase each per round, in an
// order rotated every round; "none" always runs, it is the baseline:
//   none      no probe.
//   sockets   the real agent CLI, --probe-variant sockets.
//   goFollowed  the sockets program as the agent renders it for a Go operator
//             whose requests its Go probe reads: the target marked
//             request-level, its successful sends left after one lookup
//             (bpftrace alone, as the bench's target is no Go binary).
//             That is a program started before the Go probe followed the
//             target, which keeps its send probe until no target has
//             needed it for 10 s (then the agent restarts it without), or
//             for good while a rule can add a target (--send-hook rules).
//   goNoHook  the same, rendered as the agent runs it once every target
//             is followed per request and no rule needs the hook: without
//             the send probe, so nothing runs on sock_send_length.
//   tlsFollowed  the agent, sockets, and beside it the TLS program it runs
//             for a target on OpenSSL (on the system's libssl, following
//             the target): the second program on sock_send_length every
//             send pays. The target calls no OpenSSL: its uprobes' cost per
//             SSL call is not in this table.
//   syscalls  the same, --probe-variant syscalls.
//   strace    strace -f -qq -e trace=write -o /dev/null -p TARGET: ptrace
//             stops the target at every syscall, send()s included (no
//             kernel-side filter on an attached process); it does not touch
//             the other loops or the reader at all, so their rows show only
//             what strace's own CPU use takes from a 2-CPU machine.
//   printf    the one-liner people write first: bpftrace printing pid, comm
//             and return value at every sys_exit_write and sys_exit_sendto of
//             every process, output to /dev/null. No filter in the kernel:
//             every write crosses to user space, bpftrace's own writes of its
//             output included, so it feeds itself.
//   floor     bpftrace -e 'tracepoint:sock:sock_send_length { }': an empty
//             program (bpftrace 0.17 accepts the empty body) on the agent's
//             send tracepoint. What attaching a tracepoint costs on this
//             kernel before any program logic: no bpftrace probe there can
//             cost less.
//   floorLookup  the same tracepoint, its program only the "is this pid a
//             target" lookup (a predicate on a one-key map holding the
//             target): the least a send hook that filters in the kernel does.
//   sysFloor, sysLookup  both on the syscall exits a send hook would take
//             without sock_send_length (sys_exit_sendto, sendmsg, write,
//             writev): file writes pay them too.
//   kfuncFloor, kfuncLookup  both on the BTF trampolines of TCP's send
//             (kfunc:tcp_sendmsg, kretfunc:tcp_sendmsg: fentry/fexit, which
//             fire on TCP sends only). Left out, and said why, where bpftrace
//             cannot attach kfunc probes (bpftrace --info).
// The floors and lookups compare the candidate hooks for the agent's send
// path: run them together (--configurations floor,floorLookup,sysFloor,...).
// A configuration is started for its phase, measured once the kernel shows it
// attached (the agent: /readyz; strace: the target's TracerPid; bpftrace:
// bpftool perf show lists its tracepoints), and stopped (detached, its
// processes gone) before the next phase. After each agent phase the agent's
// own /metrics must show the target's sends, so the measured path is the one
// the probe filters in.
//
// HOW TO READ. Each loop reports ns/op on two clocks: wall (CLOCK_MONOTONIC,
// what the caller waits) and CPU (the calling thread's CPU clock, where a
// tracepoint's program runs, blind to the time other processes had the CPU).
// On a shared, loaded machine the CPU column is the steadier one; strace's
// cost is mostly in the wall column (the target waits, stopped, while strace
// runs). A phase keeps the fastest of its runs; the table gives, per
// operation and configuration, the median over rounds, the range, and the
// added ns and ratio against "no probe", each the median of per-round pairs
// (the load drifts between rounds). Below the table:
//   - the reader's recv(): CPU ns and context switches per 1000 recv, median
//     over every run. No BPF program runs on receive, yet its CPU ns moves
//     with the configuration: on one CPU the reader runs only when the sender
//     is preempted, so a slower send changes how many messages the reader
//     finds per wake-up (1000 / voluntary switches), and each wake-up costs
//     the reader a fixed few microseconds. If the added ns per added switch
//     comes out about the same for every configuration, the switches are the
//     whole story; one far above the others adds something else (cache
//     misses, say). strace is apart: it stops the sender at every send, so
//     the reader wakes once per message;
//   - whether the agent counted the target's sends;
//   - how much CPU each configuration's own processes used while the loops
//     ran (on 2 CPUs that is contention the loops feel too);
//   - any bpftrace not started by the phase's configuration that ran during
//     a phase. Such a bpftrace adds its own probes' cost, so a phase first
//     waits a while for it to finish, and a round in which one ran anyway is
//     left out of the tables when at least one round was clean;
//   - per configuration that runs bpftrace, its BPF programs' own run time
//     from the kernel, per operation of each loop and per program: where the
//     added nanoseconds go. kernel.bpf_stats_enabled costs every run of
//     every program two clock reads, so it is on only for one extra run of
//     each loop per phase, whose clocks are not kept: the timed runs see the
//     probes as a node without the bench does.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { attachedBpftracePids, sleep, startAgentRun } from "./agentRun.ts";
import { bpfStatsSwitch, programCounters, programStats, ranBetween } from "./bpfProgramStats.ts";
import { CostTable, median, type Sample } from "./costTable.ts";
import { compileLoops, FileLoop, SendLoop, startServer, type LineProcess, type ReaderCost } from "./loopProcesses.ts";
import { positiveOption } from "./positiveOption.ts";
import { textTable } from "./textTable.ts";
import {
  FLOOR_TRACEPOINTS,
  KFUNC_SEND_PROBES,
  kfuncUnavailable,
  lookupProgram,
  oneLiner,
  startBpftrace,
  startProgram,
  startRequestLevelProbe,
  startStrace,
  straceArgs,
  SYSCALL_SEND_TRACEPOINTS,
  withTlsProgram,
  type ToolRun,
} from "./toolRun.ts";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** Lets a configuration's own start-up work (the agent's first target scan, first tick) finish before timing. */
const SETTLE_MS = 500;
/** Timed runs of each loop per phase; the fastest is kept. */
const RUNS_PER_PHASE = 3;
/** How long, over the whole run, phases may wait for someone else's bpftrace to finish. */
const QUIET_WAIT_BUDGET_MS = 30_000;
/** The probe's counts reach /metrics on its 1 s tick. */
const COUNT_WAIT_MS = 3000;
/** Fewer added reader switches per 1000 recv than this are noise, not a cost to divide by. */
const MIN_ADDED_SWITCHES = 5;

interface Configuration {
  key: string;
  label: string;
  /** What runs, for the report. */
  what: string;
  /** Tools it needs besides bpftrace and gcc. */
  needs: string[];
  /** Starts it and resolves once it is attached; null for the baseline. */
  start: ((targetPid: number, apiserver: string) => Promise<ToolRun>) | null;
  /** Why it cannot run on this machine, or null; asked once, before the first round. */
  unavailable?: () => string | null;
}

const PRINTF_TRACEPOINTS = ["syscalls:sys_exit_write", "syscalls:sys_exit_sendto"];
const PRINTF_BODY = 'printf("%d %s %d\\n", pid, comm, args->ret);';

const agent = (variant: string): Configuration["start"] => (targetPid, apiserver) => startAgentRun({ targetPid, apiserver, variant });

const CONFIGURATIONS: Configuration[] = [
  { key: "none", label: "no probe", what: "nothing attached", needs: [], start: null },
  { key: "sockets", label: "agent: sockets", what: "lostwrite agent --probe-variant sockets", needs: [], start: agent("sockets") },
  {
    key: "goFollowed",
    label: "sockets: Go target",
    what: "the agent's sockets program with the target marked as its Go probe marks a Go operator's (its successful sends left alone)",
    needs: ["bpftool"],
    start: (targetPid, apiserver) => startRequestLevelProbe(targetPid, apiserver, true),
  },
  {
    key: "goNoHook",
    label: "sockets: Go target, no hook",
    what: "the agent's sockets program as rendered when every target is followed per request and no rule can add one: without its send probe",
    needs: ["bpftool"],
    start: (targetPid, apiserver) => startRequestLevelProbe(targetPid, apiserver, false),
  },
  {
    key: "tlsFollowed",
    label: "sockets + TLS program",
    what: "lostwrite agent --probe-variant sockets, and beside it the TLS program it runs for a target on OpenSSL, following the target",
    needs: ["bpftool"],
    start: async (targetPid, apiserver) => withTlsProgram(await startAgentRun({ targetPid, apiserver, variant: "sockets" }), targetPid),
  },
  { key: "syscalls", label: "agent: syscalls", what: "lostwrite agent --probe-variant syscalls", needs: [], start: agent("syscalls") },
  {
    key: "strace",
    label: "strace: target",
    what: `strace ${straceArgs("TARGET").join(" ")} (the target only: other loops and the reader untraced)`,
    needs: ["strace"],
    start: (targetPid) => startStrace(targetPid),
  },
  {
    key: "printf",
    label: "bpftrace printf",
    what: `bpftrace -e '${oneLiner(PRINTF_TRACEPOINTS, PRINTF_BODY)}' >/dev/null (every process's writes)`,
    needs: ["bpftool"],
    start: () => startBpftrace(PRINTF_TRACEPOINTS, PRINTF_BODY),
  },
  {
    key: "floor",
    label: "floor: empty bt",
    what: `bpftrace -e '${oneLiner(FLOOR_TRACEPOINTS, "")}' (an empty program: the cost of attaching at all)`,
    needs: ["bpftool"],
    start: () => startBpftrace(FLOOR_TRACEPOINTS, ""),
  },
  {
    key: "floorLookup",
    label: "lookup: send tp",
    what: `bpftrace -e '${lookupProgram(FLOOR_TRACEPOINTS.map((t) => `tracepoint:${t}`), "TARGET")}'`,
    needs: ["bpftool"],
    start: (targetPid) => startProgram(lookupProgram(FLOOR_TRACEPOINTS.map((t) => `tracepoint:${t}`), targetPid), FLOOR_TRACEPOINTS),
  },
  {
    key: "sysFloor",
    label: "floor: syscall exits",
    what: `bpftrace -e '${oneLiner(SYSCALL_SEND_TRACEPOINTS, "")}'`,
    needs: ["bpftool"],
    start: () => startBpftrace(SYSCALL_SEND_TRACEPOINTS, ""),
  },
  {
    key: "sysLookup",
    label: "lookup: syscall exits",
    what: `bpftrace -e '${lookupProgram(SYSCALL_SEND_TRACEPOINTS.map((t) => `tracepoint:${t}`), "TARGET")}'`,
    needs: ["bpftool"],
    start: (targetPid) => startProgram(lookupProgram(SYSCALL_SEND_TRACEPOINTS.map((t) => `tracepoint:${t}`), targetPid), SYSCALL_SEND_TRACEPOINTS),
  },
  {
    key: "kfuncFloor",
    label: "floor: kfunc tcp_sendmsg",
    what: `bpftrace -e '${KFUNC_SEND_PROBES.join(", ")} { }'`,
    needs: ["bpftool"],
    start: () => startProgram(`${KFUNC_SEND_PROBES.join(", ")} { }`, KFUNC_SEND_PROBES),
    unavailable: kfuncUnavailable,
  },
  {
    key: "kfuncLookup",
    label: "lookup: kfunc tcp_sendmsg",
    what: `bpftrace -e '${lookupProgram(KFUNC_SEND_PROBES, "TARGET")}'`,
    needs: ["bpftool"],
    start: (targetPid) => startProgram(lookupProgram(KFUNC_SEND_PROBES, targetPid), KFUNC_SEND_PROBES),
    unavailable: kfuncUnavailable,
  },
];
const BASELINE = "none";

const USAGE = `usage: npm run bench -- [--rounds N] [--iterations N] [--cpu N] [--configurations a,b,c]

  --rounds N               phases per configuration, interleaved (default 3)
  --iterations N           operations per timed run (default 50000)
  --cpu N                  the CPU every loop runs on (default: the last one)
  --configurations a,b,c   which to run (default: all); "${BASELINE}" always runs, it is the baseline:
${CONFIGURATIONS.map((c) => `                             ${c.key.padEnd(12)}${c.what}`).join("\n")}

Needs root, bpftrace and gcc; strace and bpftool for the configurations that use them.`;

const OPERATIONS = [
  { key: "targetSend", label: "target send() 100 B, apiserver socket" },
  { key: "apiserverRecv", label: "its reader: recv() 100 B, CPU ns" },
  { key: "otherSend", label: "non-target send() 100 B, same server" },
  { key: "otherFile", label: "non-target write() 100 B, file" },
];

interface Options {
  rounds: number;
  iterations: number;
  cpu: number;
  configurations: Configuration[];
}

function parseOptions(argv: string[]): Options {
  try {
    const { values } = parseArgs({
      args: argv,
      options: {
        rounds: { type: "string" },
        iterations: { type: "string" },
        cpu: { type: "string" },
        configurations: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    });
    if (values.help) {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    }
    return {
      rounds: positiveOption("rounds", values.rounds, 3),
      iterations: positiveOption("iterations", values.iterations, 50_000),
      cpu: cpuOption(values.cpu),
      configurations: configurationsOption(values.configurations),
    };
  } catch (err) {
    process.stderr.write(`bench: ${(err as Error).message}\n${USAGE}\n`);
    process.exit(2);
  }
}

function cpuOption(value: string | undefined): number {
  const cpus = os.availableParallelism();
  const cpu = value === undefined ? cpus - 1 : Number(value);
  if (!Number.isInteger(cpu) || cpu < 0 || cpu >= cpus) throw new Error(`--cpu must be a CPU number from 0 to ${cpus - 1}, got ${JSON.stringify(value)}`);
  return cpu;
}

/** The configurations named (and the baseline), in the list's order. */
function configurationsOption(value: string | undefined): Configuration[] {
  if (value === undefined) return CONFIGURATIONS;
  const names = value.split(",").map((name) => name.trim());
  const known = CONFIGURATIONS.map((c) => c.key);
  const unknown = names.find((name) => !known.includes(name));
  if (unknown !== undefined) throw new Error(`--configurations: unknown configuration ${JSON.stringify(unknown)} (known: ${known.join(", ")})`);
  return CONFIGURATIONS.filter((c) => c.key === BASELINE || names.includes(c.key));
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

function missingRequirements(configurations: Configuration[]): string[] {
  const missing: string[] = [];
  if (process.getuid?.() !== 0) missing.push("not root (bpftrace loads BPF programs)");
  const tools = new Set(["bpftrace", "gcc", ...configurations.flatMap((c) => c.needs)]);
  for (const tool of tools) {
    try {
      execFileSync(tool, ["--version"], { stdio: "ignore" });
    } catch {
      missing.push(`${tool} not on PATH (apt-get install ${tool})`);
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

/** Per configuration, what its phases saw besides the cost table. */
interface Findings {
  /** Per round: every run's reader cost. */
  reader: Map<number, ReaderCost[]>;
  /** Per phase: the target sends the agent counted. */
  counted: number[];
  /** Per phase: the share of one CPU its own processes used while the loops ran. */
  cpuShare: number[];
  /** Program name → per phase: runs and ns per run, over the attributed runs. */
  programs: Map<string, { runs: number[]; nsPerRun: number[] }>;
  /** Operation → per timed run: the configuration's BPF programs' runs and run time per operation of that loop. */
  perOperation: Map<string, { runsPerOp: number[]; nsPerOp: number[] }>;
}

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2));
  const { rounds, iterations, cpu } = options;
  // A configuration this machine cannot run is left out and named, not a failed run.
  const unavailable = new Map(options.configurations.map((c) => [c.key, c.unavailable?.() ?? null]));
  const configurations = options.configurations.filter((c) => unavailable.get(c.key) === null);
  const skipped = options.configurations.filter((c) => unavailable.get(c.key) !== null).map((c) => `${c.label}: ${unavailable.get(c.key)}`);
  const missing = missingRequirements(configurations);
  if (missing.length > 0) {
    process.stderr.write(`bench: cannot measure probe cost here: ${missing.join("; ")}\n`);
    process.exit(1);
  }

  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-bench-"));
  const children: LineProcess[] = [];
  let active: ToolRun | null = null;
  let interrupted = false;
  const bpfStats = bpfStatsSwitch();
  const teardown = async (): Promise<void> => {
    bpfStats.restore();
    const running = active;
    active = null;
    await running?.stop();
    for (const child of children) child.kill();
    rmSync(dir, { recursive: true, force: true });
  };
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => {
      interrupted = true;
      process.stderr.write(`\nbench: ${signal}, stopping the running configuration and the loops\n`);
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
    // Timed runs and the one attributed run (only configurations that run bpftrace are counted).
    const expectedCount = (RUNS_PER_PHASE + 1) * (iterations + Math.floor(iterations / 10) + 1);

    const out = (line = ""): void => void process.stdout.write(`${line}\n`);
    const labelWidth = Math.max(...configurations.map((c) => c.label.length));
    out("lostwrite probe cost");
    for (const line of machineDescription()) out(line);
    out(`setup:    ${rounds} rounds × ${configurations.length} configurations, ${iterations} operations per timed run, the fastest of ${RUNS_PER_PHASE} runs per phase;`);
    out(`          every loop and the server's readers on CPU ${cpu}; the agent and the tools wherever the scheduler puts them;`);
    out(`          target pid ${target.process.pid}, apiserver ${apiserver} (loopback), non-target pids ${other.process.pid} (send), ${file.process.pid} (file)`);
    for (const [i, config] of configurations.entries()) out(`${i === 0 ? "ran:" : "".padEnd(4)}      ${config.label.padEnd(labelWidth)}  ${config.what}`);
    for (const line of skipped) out(`skipped:  ${line}`);
    out();

    const table = new CostTable(OPERATIONS, configurations, BASELINE);
    const findings = new Map(configurations.map((c): [string, Findings] => [c.key, { reader: new Map(), counted: [], cpuShare: [], programs: new Map(), perOperation: new Map() }]));
    const foreign: string[] = [];
    const restarted: string[] = [];
    const contaminated = new Set<number>();
    let quietBudgetMs = QUIET_WAIT_BUDGET_MS;
    const phases = rounds * configurations.length;
    let phase = 0;

    for (let round = 0; round < rounds; round++) {
      for (let i = 0; i < configurations.length; i++) {
        const config = configurations[(round + i) % configurations.length]!;
        const found = findings.get(config.key)!;
        phase++;
        if (interrupted) return;
        quietBudgetMs -= await waitForQuiet(quietBudgetMs);
        const phaseStarted = Date.now();
        const running = (active = config.start ? await config.start(target.process.pid, apiserver) : null);
        const startup = (Date.now() - phaseStarted) / 1000;
        // Ours are whatever bpftrace the configuration runs now (also after an agent's restart).
        const others = (): number[] => {
          const ours = new Set(running?.bpftrace() ?? []);
          return attachedBpftracePids().filter((pid) => !ours.has(pid));
        };
        const othersBefore = others();
        await sleep(SETTLE_MS);
        const timedFrom = Date.now();
        const cpuFrom = running?.cpuSeconds() ?? 0;

        // Several short runs per phase, the fastest kept on each clock: on a
        // shared machine noise only ever adds time.
        const targetSend = fastest();
        const apiserverRecv = fastest();
        const otherSend = fastest();
        const otherFile = fastest();
        const readerRuns: ReaderCost[] = [];
        for (let run = 0; run < RUNS_PER_PHASE; run++) {
          const sent = await target.run(iterations);
          targetSend.add(sent.send);
          apiserverRecv.add({ wallNs: null, cpuNs: sent.recv.cpuNs });
          readerRuns.push(sent.recv);
          otherSend.add((await other.run(iterations)).send);
          otherFile.add(await file.run(iterations));
        }
        // Then one more run of each loop with the kernel's statistics on, its
        // clocks not kept: the programs' own run time over it, per operation
        // of that loop (warm-up and header included). The probe's cost
        // without the tracepoint around it and without the scheduling effects
        // the clocks also see. Whatever else ran on the node meanwhile (the
        // agent's own sends, say) is in it too: a few runs in 50 000.
        if (running) {
          const warmUp = Math.floor(iterations / 10);
          const attribute = async (operation: string, operations: number, run: () => Promise<unknown>): Promise<void> => {
            const before = programCounters(running.bpftrace());
            await run();
            const { runs, runTimeNs } = ranBetween(before, programCounters(running.bpftrace()));
            const entry = found.perOperation.get(operation) ?? { runsPerOp: [], nsPerOp: [] };
            found.perOperation.set(operation, entry);
            entry.runsPerOp.push(runs / operations);
            entry.nsPerOp.push(runTimeNs / operations);
          };
          bpfStats.on();
          try {
            await attribute("targetSend", iterations + warmUp + 1, () => target.run(iterations));
            await attribute("otherSend", iterations + warmUp + 1, () => other.run(iterations));
            await attribute("otherFile", iterations + warmUp, () => file.run(iterations));
          } finally {
            bpfStats.off();
          }
        }
        table.record("targetSend", config.key, round, targetSend.value);
        table.record("apiserverRecv", config.key, round, apiserverRecv.value);
        table.record("otherSend", config.key, round, otherSend.value);
        table.record("otherFile", config.key, round, otherFile.value);
        found.reader.set(round, readerRuns);

        // What the configuration's own processes took of the machine while the loops ran.
        const cpuShare = running ? (running.cpuSeconds() - cpuFrom) / ((Date.now() - timedFrom) / 1000) : 0;
        const othersDuring = [...new Set([...othersBefore, ...others()])];
        if (othersDuring.length > 0) {
          foreign.push(`round ${round + 1} ${config.label}: bpftrace pid ${othersDuring.join(", ")}`);
          contaminated.add(round);
        }

        let note = "";
        if (running) {
          found.cpuShare.push(cpuShare);
          note = `; ready in ${startup.toFixed(1)} s, used ${(cpuShare * 100).toFixed(0)} % of a CPU`;
          for (const program of programStats(running.bpftrace())) {
            const entry = found.programs.get(program.name) ?? { runs: [], nsPerRun: [] };
            found.programs.set(program.name, entry);
            entry.runs.push(program.runs);
            if (program.runs > 0) entry.nsPerRun.push(program.runTimeNs / program.runs);
          }
          if (running.countedWrites) {
            let seen = 0;
            const deadline = Date.now() + COUNT_WAIT_MS;
            while ((seen = await running.countedWrites()) < expectedCount && Date.now() < deadline) await sleep(200);
            found.counted.push(seen);
            note += `, counted ${seen}/${expectedCount} target sends`;
          }
          const restarts = (await running.restarts?.()) ?? 0;
          if (restarts > 0) {
            restarted.push(`round ${round + 1} ${config.label}: ${restarts}`);
            note += `, restarted bpftrace ${restarts}×`;
          }
          active = null;
          await running.stop();
        }
        const show = (s: Sample): string => `${s.wallNs === null ? "" : `${s.wallNs.toFixed(0)}/`}${s.cpuNs.toFixed(0)}`;
        const reader = (r: ReaderCost): string => `${r.cpuNs.toFixed(0)}/${(r.voluntaryPer1000 + r.involuntaryPer1000).toFixed(0)}`;
        process.stderr.write(
          `[${phase}/${phases}] round ${round + 1} ${config.label.padEnd(labelWidth)} wall/CPU ns: send ${show(targetSend.value)} ` +
            `recv ${show(apiserverRecv.value)} (per run CPU ns/switches per 1000: ${readerRuns.map(reader).join(" ")}) ` +
            `other send ${show(otherSend.value)} file ${show(otherFile.value)}${note}\n`,
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
    out();
    out(readerTable(configurations, findings, used));
    out();
    for (const config of configurations) {
      const seen = findings.get(config.key)!.counted;
      if (seen.length === 0) continue;
      const short = seen.filter((n) => n < expectedCount).length;
      out(
        short === 0
          ? `check:    ${config.label}: the agent counted all ${expectedCount} target sends (timed, warm-up, header) in every round`
          : `check:    ${config.label}: the agent counted fewer than ${expectedCount} target sends in ${short} of ${seen.length} rounds (${seen.join(", ")}): the target path was not measured there`,
      );
    }
    for (const config of configurations) {
      const shares = findings.get(config.key)!.cpuShare;
      if (shares.length > 0) out(`cpu:      ${config.label.padEnd(labelWidth)}  its own processes used ${(median(shares) * 100).toFixed(1).padStart(5)} % of one CPU (median) while the loops ran`);
    }
    out(
      foreign.length === 0
        ? "check:    no other bpftrace ran on the machine during any phase"
        : `note:     other bpftrace processes ran during ${foreign.length} of ${phases} phases:\n          ${foreign.join("\n          ")}`,
    );
    if (restarted.length > 0) out(`warning:  the agent restarted bpftrace during a phase (probe briefly detached): ${restarted.join("; ")}`);
    out();
    out(programsPerOperation(configurations, findings));
    out();
    out("BPF programs' own run time (kernel.bpf_stats_enabled) over the attributed runs, median over phases; the tracepoint's entry and exit come on top");
    out(`${"configuration".padEnd(labelWidth + 2)}${"program".padEnd(17)}${"runs/phase".padStart(12)}${"ns/run".padStart(9)}`);
    for (const config of configurations) {
      for (const [name, { runs, nsPerRun }] of [...findings.get(config.key)!.programs].sort(([a], [b]) => a.localeCompare(b))) {
        out(`${config.label.padEnd(labelWidth + 2)}${name.padEnd(17)}${median(runs).toFixed(0).padStart(12)}${(nsPerRun.length ? median(nsPerRun).toFixed(0) : "—").padStart(9)}`);
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

/**
 * Per operation and configuration that runs bpftrace: its programs' runs and
 * run time per operation, medians over every timed run. The direct cost,
 * next to the clocks' added ns, which also carry the scheduling effects.
 */
function programsPerOperation(configurations: Configuration[], findings: Map<string, Findings>): string {
  const header = ["operation", "configuration", "program runs/op", "program ns/op"];
  const rows: string[][] = [];
  for (const operation of OPERATIONS) {
    for (const config of configurations) {
      const entry = findings.get(config.key)!.perOperation.get(operation.key);
      if (!entry) continue;
      rows.push([operation.label, config.label, median(entry.runsPerOp).toFixed(2), median(entry.nsPerOp).toFixed(0)]);
    }
  }
  return [
    "the configurations' BPF programs' own run time per operation of each loop (kernel.bpf_stats_enabled, on for one extra",
    "run of each loop per phase; median over phases): the probe's code alone, without the tracepoint's entry and exit or the",
    "context switches (the statistics' own two clock reads per run are in it: most of an empty program's figure)",
    textTable(header, rows, 2),
  ].join("\n");
}

/**
 * The reader's recv() per configuration: CPU ns and context switches per 1000
 * recv, each the median over every run of the used rounds (not the fastest
 * run: the switches of a run go with its CPU ns).
 */
function readerTable(configurations: Configuration[], findings: Map<string, Findings>, rounds: Set<number>): string {
  const runs = (key: string): ReaderCost[] => [...findings.get(key)!.reader].filter(([round]) => rounds.has(round)).flatMap(([, r]) => r);
  const base = runs(BASELINE);
  const baseCpu = median(base.map((r) => r.cpuNs));
  const baseSwitches = median(base.map((r) => r.voluntaryPer1000 + r.involuntaryPer1000));
  const signed = (n: number, digits: number): string => (n > 0 ? "+" : "") + n.toFixed(digits);
  const header = ["configuration", "runs", "CPU ns/recv", "added", "voluntary", "involuntary", "added", "recv per wake-up", "added ns per added switch"];
  const rows = configurations.map((config) => {
    const r = runs(config.key);
    const cpuNs = median(r.map((x) => x.cpuNs));
    const voluntary = median(r.map((x) => x.voluntaryPer1000));
    const switches = median(r.map((x) => x.voluntaryPer1000 + x.involuntaryPer1000));
    const isBase = config.key === BASELINE;
    // Too few added switches to divide by: noise.
    const perSwitch = Math.abs(switches - baseSwitches) < MIN_ADDED_SWITCHES ? "—" : (((cpuNs - baseCpu) * 1000) / (switches - baseSwitches)).toFixed(0);
    return [
      config.label,
      String(r.length),
      cpuNs.toFixed(0),
      isBase ? "—" : signed(cpuNs - baseCpu, 0),
      voluntary.toFixed(1),
      median(r.map((x) => x.involuntaryPer1000)).toFixed(1),
      isBase ? "—" : signed(switches - baseSwitches, 1),
      (1000 / voluntary).toFixed(1),
      isBase ? "—" : perSwitch,
    ];
  });
  return [
    "the reader's recv(): CPU ns and context switches per 1000 recv (getrusage RUSAGE_THREAD around its timed loop),",
    "median over every run of the used rounds; 'added' against no probe (the second one: voluntary + involuntary);",
    "the last column is what each added switch would cost the reader if the switches explained all of its added ns",
    textTable(header, rows),
  ].join("\n");
}

await main();
