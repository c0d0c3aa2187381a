// How long the node is blind when its bpftrace is killed: the real agent CLI
// is started, and its bpftrace is SIGKILLed again and again, 1–3 s after each
// re-attach (a healthy run: attached >= 500 ms), timing each kill until
// lostwrite_probe_up is 1 again. Not a test: it prints numbers.
//
// USAGE: node_modules/.bin/node agent/bench/reattach.ts [kills=20]   (root, bpftrace)
//
// HOW TO READ. A re-attach is the supervisor's wait (its log line "bpftrace
// exited; restarting" gives it, inMs, and whether the run was healthy) plus
// bpftrace compiling and attaching the program again, most of it. Compiling
// takes CPU: other bpftrace processes on the machine (listed per kill) slow it.
import { median } from "./costTable.ts";
import { attachedBpftracePids, descendants, liveComm, sleep } from "./agentRun.ts";
import { startAgentProcess, sumMetric, waitFor } from "../test/e2e/support/agentProcess.ts";

const USAGE = "usage: node_modules/.bin/node agent/bench/reattach.ts [kills=20]   (root, bpftrace)";
const READY_TIMEOUT_MS = 60_000;

interface LogLine {
  msg: string;
  inMs?: number;
  afterHealthyRun?: boolean;
}

const arg = process.argv[2];
if (arg === "-h" || arg === "--help") {
  console.log(USAGE);
  process.exit(0);
}
const kills = arg === undefined ? 20 : Number(arg);
if (!Number.isInteger(kills) || kills < 1) {
  console.error(USAGE);
  process.exit(2);
}

const agent = await startAgentProcess(["--target-pid", String(process.pid), "--apiserver", "127.0.0.1:1"]);
const agentPid = agent.child.pid!;
const log = agent.log;
const restartLine = (kill: number): LogLine | undefined =>
  log.filter((line) => line.msg === "bpftrace exited; restarting")[kill - 1];

const ours = (): number[] => descendants(agentPid).filter((pid) => liveComm(pid) === "bpftrace");
const reattachMs: number[] = [];
try {
  console.log(`${kills} SIGKILLs of the agent's bpftrace, 1–3 s after each re-attach`);
  console.log("kill  re-attach  supervisor wait  healthy run  other bpftrace on the machine");
  for (let kill = 1; kill <= kills; kill++) {
    await sleep(1000 + Math.random() * 2000);
    const running = ours();
    if (running.length !== 1) throw new Error(`expected one bpftrace under the agent, found ${running.length}`);
    const others = attachedBpftracePids().filter((pid) => !running.includes(pid)).length;
    const killedAt = Date.now();
    process.kill(running[0]!, "SIGKILL");
    await waitFor(
      `bpftrace re-attached after kill ${kill}`,
      async () => {
        const samples = await agent.metrics();
        return sumMetric(samples, "lostwrite_probe_restarts_total", { reason: "exited" }) === kill && sumMetric(samples, "lostwrite_probe_up") === 1;
      },
      READY_TIMEOUT_MS,
    );
    const ms = Date.now() - killedAt;
    reattachMs.push(ms);
    const line = restartLine(kill);
    console.log(
      [
        String(kill).padStart(4),
        `${(ms / 1000).toFixed(2)} s`.padStart(9),
        (line?.inMs === undefined ? "?" : `${line.inMs} ms`).padStart(15),
        String(line?.afterHealthyRun ?? "?").padStart(11),
        String(others).padStart(4),
      ].join("  "),
    );
  }
  const seconds = (ms: number): string => `${(ms / 1000).toFixed(2)} s`;
  console.log(`re-attach: ${reattachMs.map(seconds).join(", ")}`);
  console.log(`min ${seconds(Math.min(...reattachMs))}, median ${seconds(median(reattachMs))}, max ${seconds(Math.max(...reattachMs))}`);
} finally {
  await agent.stop();
}
