// `npm run bench:latency`: how long a lost write takes from the kernel to an
// on-call engineer's screen — the kernel time of the failure to the moment
// the event arrives on the agent's /events WebSocket (what `lostwrite tail`
// reads). Not a test: it prints numbers.
//
// USAGE: npm run bench:latency -- [--losses N] [--window MS]   (root, bpftrace, python3)
//
// WHAT RUNS. The testbed apiserver, the real agent CLI (real bpftrace) with
// a correlation window of --window ms, and two python3 HTTPS clients, each
// losing status PATCHes one after the other to a reset after the request:
//   - "quiet", a process that has never sent a span: its loss has nothing to
//     wait for and must be on /events at once (goal: p99 ≤ 50 ms);
//   - "traced", a process that sends spans (one span of its pid first, as any
//     traced operator's SDK would): its loss waits the window for the span
//     that may explain it, none comes here, so it is due at window + 50 ms.
//
// HOW TO READ. Latency = arrival on /events (this process's wall clock) −
// the event's `time` (the kernel's CLOCK_MONOTONIC timestamp of the failure,
// converted to wall time by the agent): both clocks are this machine's. For
// the traced kind, the window is subtracted: what is left is the delay the
// agent adds on top of the wait it is asked to make.
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import WebSocket from "ws";
import { startApiserver } from "../../testbed/apiserver/apiserver.ts";
import type { LossEvent } from "../src/model.ts";
import { parseRfc3339Ns } from "../src/sinks/rfc3339.ts";
import { startAgentProcess, waitFor } from "../test/e2e/support/agentProcess.ts";
import { NamedClients, type HttpsClient } from "../test/e2e/support/httpsClient.ts";
import { positiveOption } from "./positiveOption.ts";

const WIDGETS = "/apis/demo.lostwrite.dev/v1/namespaces";

function options(): { losses: number; windowMs: number } {
  const { values } = parseArgs({ options: { losses: { type: "string" }, window: { type: "string" } }, strict: true });
  return { losses: positiveOption("losses", values.losses, 40), windowMs: positiveOption("window", values.window, 2000) };
}

/** The value at quantile q (nearest rank) of `values`. */
function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/** Wall clock now, ns, at the resolution performance.now() gives. */
const nowNs = (): bigint => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n;

async function main(): Promise<void> {
  const { losses, windowMs } = options();
  if (process.getuid?.() !== 0) throw new Error("needs root (bpftrace loads BPF programs)");
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-bench-latency-"));
  const api = await startApiserver({ dir });
  const clients = new NamedClients(api.port, 1.5);
  const agent = await startAgentProcess([
    "--target-comm", "^lwl-",
    "--apiserver", `127.0.0.1:${api.port}`,
    "--correlation-window", `${windowMs}ms`,
    "--span-grace", "0s",
  ]);
  const feed = new WebSocket(`${agent.url.replace(/^http/, "ws")}/events`);
  /** pid → latencies (ns) of its events, as they arrive on /events. */
  const arrived = new Map<number, bigint[]>();
  feed.on("message", (data: Buffer) => {
    const at = nowNs();
    const event = JSON.parse(data.toString()) as LossEvent;
    const kernelNs = parseRfc3339Ns(event.time);
    if (event.pid === null || kernelNs === null) return;
    arrived.set(event.pid, [...(arrived.get(event.pid) ?? []), at - kernelNs]);
  });
  await new Promise<void>((resolve, reject) => {
    feed.once("open", () => resolve());
    feed.once("error", reject);
  });

  /** `count` losses of client `c`, one after the other; the latency of each, ms. */
  const lose = async (c: HttpsClient, kind: string, count: number, waitMs: number): Promise<number[]> => {
    await c.watchedBy(agent);
    for (let i = 0; i < count; i++) {
      await c.run("connect");
      api.control.addRule({ id: `${kind}-${i}`, method: "PATCH", path: `${WIDGETS}/${kind}/widgets/w${i}/status`, action: "reset", afterBytes: 100 });
      await c.run(`request PATCH ${WIDGETS}/${kind}/widgets/w${i}/status 500`);
      await waitFor(`loss ${i + 1} of ${c.comm} on /events`, () => (arrived.get(c.pid)?.length ?? 0) > i, waitMs + 10_000);
      process.stderr.write(".");
    }
    process.stderr.write("\n");
    return (arrived.get(c.pid) ?? []).map((ns) => Number(ns) / 1e6);
  };

  try {
    const quiet = await lose(clients.client("lwl-quiet"), "quiet", losses, 0);

    const traced = clients.client("lwl-traced");
    await traced.watchedBy(agent);
    // From the client itself: the agent takes a process's spans only from that process.
    const sent = await traced.run(`span 127.0.0.1 ${agent.otlpPort}`);
    if (sent.status !== 200) throw new Error(`the traced client's span was refused: ${sent.status} ${sent.text}`);
    const tracedCount = Math.max(5, Math.ceil(losses / 4));
    const waited = (await lose(traced, "traced", tracedCount, windowMs)).map((ms) => ms - windowMs);

    const row = (label: string, values: number[], goal: string): string =>
      `${label.padEnd(44)} ${String(values.length).padStart(6)} ${quantile(values, 0.5).toFixed(1).padStart(8)} ${quantile(values, 0.99).toFixed(1).padStart(8)} ${Math.max(...values).toFixed(1).padStart(8)}   ${goal}`;
    console.log(`kernel → /events latency, ms (real agent and bpftrace, correlation window ${windowMs} ms; load ${os.loadavg()[0]!.toFixed(2)})`);
    console.log(`${"".padEnd(44)} ${"losses".padStart(6)} ${"p50".padStart(8)} ${"p99".padStart(8)} ${"max".padStart(8)}`);
    console.log(row("process that sends no spans", quiet, "goal: p99 ≤ 50"));
    console.log(row("process that sends spans, beyond the window", waited, "goal: p99 ≤ 50"));
  } finally {
    feed.close();
    clients.close();
    await agent.stop();
    await api.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`bench:latency: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
