// A span sender is who its connection says it is, on the real kernel, with
// the agent following two python processes by comm: `lwvictim`, whose status
// write the stand-in apiserver resets, and `lwforger`. Each sends OTLP/JSON
// from its own process over its own keep-alive connection, as an SDK does.
//
// The victim's own reconcile span says nothing of errors: its loss is silent
// (`noticed: "no"`). The forger sends, in the victim's name (resource
// process.pid = the victim's pid), an ERROR reconcile span that would make the
// loss look noticed, and a reconcile with a status PATCH answered 409 for
// widgets/w99, which would become an `http_rejected` loss the victim never had.
// Strangers that are no target (this test process over HTTP, an SDK exporter
// over gRPC) try the same. Every forged request is refused and counted; the
// victim's loss is joined with its own span and stays silent; no loss is
// invented; the victim's own 409 still is one.
import assert from "node:assert/strict";
import { SpanStatusCode } from "@opentelemetry/api";
import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, symlink } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { jsonBody, openReconcile, protobufBody, refusedStatusPatch, type SpanDef } from "../unit/sources/spans/otlpSpans.ts";
import { faultyApiserver, portOf } from "./support/faultyApiserver.ts";
import { startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { assertKernelRequirements, skipWithoutKernel } from "./support/kernelRequirements.ts";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SENDER = path.join(HERE, "clients/lw_span_sender.py");
const GRPC_EXPORT = path.join(HERE, "clients/otlpGrpcExport.ts");
const NODE_BIN = path.join(HERE, "../../../node_modules/.bin/node");
const WINDOW = "3s";
const statusPath = (name: string): string => `/apis/demo.lostwrite.dev/v1/namespaces/widgets/widgets/${name}/status`;

interface Step {
  step: string;
  [field: string]: unknown;
}

/** A python process named `comm` running lw_span_sender.py: commands in, one result line each out. */
class SpanSender {
  readonly child: ChildProcess;
  readonly #lines: Step[] = [];
  readonly #waiters: (() => void)[] = [];

  constructor(python: string, otlpPort: number) {
    this.child = spawn(python, [SENDER, "127.0.0.1", String(otlpPort)], { stdio: ["pipe", "pipe", "inherit"] });
    createInterface({ input: this.child.stdout! }).on("line", (line) => {
      this.#lines.push(JSON.parse(line) as Step);
      for (const wake of this.#waiters.splice(0)) wake();
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  async run(command: Record<string, unknown>): Promise<Step> {
    const before = this.#lines.length;
    this.child.stdin!.write(`${JSON.stringify(command)}\n`);
    await waitFor(`${String(command.cmd)} of ${this.pid}`, () => this.#lines.length > before, 20_000);
    return this.#lines[before]!;
  }

  post(spans: SpanDef[]): Promise<Step> {
    return this.run({ cmd: "post", contentType: "application/json", body: jsonBody(spans).toString("utf8") });
  }
}

describe("span forgery on the node: a sender is who its connection says it is", { skip: skipWithoutKernel(), timeout: 120_000 }, () => {
  let dir: string;
  let agent: AgentProcess;
  let victim: SpanSender;
  let forger: SpanSender;
  const cleanup: (() => Promise<unknown> | void)[] = [];
  const now = Date.now();
  const tally = { sent: 0, refused: 0 };

  const reconcile = (traceId: string, pid: number | null, over: Partial<SpanDef> = {}): SpanDef =>
    openReconcile(traceId, now, {
      resource: pid === null ? { "service.name": "widget-operator" } : { "process.pid": pid, "service.name": "widget-operator" },
      ...over,
    });
  /** A reconcile of `name` with its status PATCH answered `code`: a loss seen only in spans. */
  const rejectedWrite = (traceId: string, pid: number, name: string, code = 409): SpanDef[] => {
    const parent = reconcile(traceId, pid, { endMs: now + 200, attributes: { controller: "widget", controllerKind: "Widget", namespace: "widgets", name } });
    return refusedStatusPatch(parent, statusPath(name), code, now, { "server.address": "127.0.0.1", "server.port": 6443 });
  };

  before(async () => {
    assertKernelRequirements();
    dir = await mkdtemp(path.join(os.tmpdir(), "lostwrite-forgery-"));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const api = await faultyApiserver();
    cleanup.push(() => void api.close());
    agent = await startAgentProcess(["--target-comm", "^lw(victim|forger)$", "--apiserver", `127.0.0.1:${portOf(api)}`, "--correlation-window", WINDOW]);
    cleanup.push(() => agent.stop());
    const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
    for (const comm of ["lwvictim", "lwforger"]) await symlink(python, path.join(dir, comm));
    victim = new SpanSender(path.join(dir, "lwvictim"), agent.otlpPort);
    forger = new SpanSender(path.join(dir, "lwforger"), agent.otlpPort);
    cleanup.push(() => void victim.child.kill("SIGKILL"), () => void forger.child.kill("SIGKILL"));
    await waitFor("the agent to follow both", () => agent.stderr.some((l) => l.includes(`lwvictim[${victim.pid}]`)) && agent.stderr.some((l) => l.includes(`lwforger[${forger.pid}]`)), 15_000);
    assert.equal((await victim.run({ cmd: "connect_api", host: "127.0.0.1", port: portOf(api) })).step, "connect_api");
  });

  after(async () => {
    if (process.env.LOSTWRITE_E2E_DEBUG && agent) console.error({ events: agent.events, agent: agent.stderr });
    for (const step of cleanup.reverse()) await Promise.resolve(step()).catch(() => undefined);
  });

  it("refuses every span a target sends in another target's name, and logs who claimed what", async () => {
    // The victim's own span: OK, so a loss under it is silent.
    const own = await victim.post([reconcile("a1".repeat(16), victim.pid)]);
    assert.equal(own.status, 200, String(own.text));

    const forgeries = [
      [reconcile("b2".repeat(16), victim.pid, { status: SpanStatusCode.ERROR })], // "the operator noticed"
      rejectedWrite("c3".repeat(16), victim.pid, "w99"),
    ];
    for (const spans of forgeries) {
      const answer = await forger.post(spans);
      tally.sent += spans.length;
      assert.equal(answer.status, 403, String(answer.text));
      assert.match(String(answer.text), new RegExp(`resource process\\.pid=${victim.pid} \\(target lwvictim\\[${victim.pid}\\]\\), but the connection is lwforger\\[${forger.pid}\\]'s`));
      tally.refused += spans.length;
    }
    const logged = agent.stderr.find((l) => l.includes("spans refused"));
    assert.ok(logged, "one log line for the refusals");
    assert.match(logged, new RegExp(`lwforger\\[${forger.pid}\\]`));
    assert.match(logged, new RegExp(`process\\.pid=${victim.pid}`));
  });

  it("refuses the same from processes that are no target, over HTTP and gRPC", async () => {
    const fromHere = await fetch(`http://127.0.0.1:${agent.otlpPort}/v1/traces`, {
      method: "POST",
      headers: { "content-type": "application/x-protobuf" },
      body: protobufBody([reconcile("d4".repeat(16), victim.pid, { status: SpanStatusCode.ERROR })]),
    });
    tally.sent += 1;
    assert.equal(fromHere.status, 403, await fromHere.text());
    tally.refused += 1;

    const grpcSpans = rejectedWrite("e5".repeat(16), victim.pid, "w99");
    const run = spawnSync(NODE_BIN, [GRPC_EXPORT, `http://127.0.0.1:${agent.otlpGrpcPort}`, JSON.stringify(grpcSpans)], { encoding: "utf8", timeout: 60_000 });
    const grpc = JSON.parse(run.stdout.trim().split("\n").pop() ?? "{}") as { code: number; error: string | null };
    tally.sent += grpcSpans.length;
    assert.equal(grpc.code, 1, "PERMISSION_DENIED is an export failure");
    assert.match(grpc.error ?? "", new RegExp(`\\(target lwvictim\\[${victim.pid}\\]\\)`));
    tally.refused += grpcSpans.length;

    // Every forged request counted as refused, none of its spans received.
    assert.equal(await agent.metric("lostwrite_spans_rejected_total", { reason: "sender_mismatch" }), 4);
    assert.equal(await agent.metric("lostwrite_spans_received_total"), 1, "only the victim's own span");
  });

  it("the victim's loss is joined with its own span and stays silent; no loss is invented", async () => {
    const lost = await victim.run({ cmd: "lose_write" });
    assert.equal(lost.closed, true, JSON.stringify(lost));
    await waitFor("the victim's loss", () => agent.events.some((e) => e.pid === victim.pid), 20_000);
    const losses = agent.events.filter((e) => e.pid === victim.pid);
    for (const event of losses) {
      const context = JSON.stringify(event);
      assert.equal(event.correlation, "span", context);
      assert.equal(event.trace_id, "a1".repeat(16), `the victim's own span, not a forged one: ${context}`);
      assert.equal(event.noticed, "no", `the forged ERROR span did not hide the silent loss: ${context}`);
    }

    // The victim's own refused write (its own pid, its own connection) is a loss.
    const real = await victim.post(rejectedWrite("f6".repeat(16), victim.pid, "w98"));
    assert.equal(real.status, 200, String(real.text));
    await waitFor("the victim's own 409", () => agent.events.some((e) => e.cause === "http_rejected" && e.reconcile?.name === "w98"), 20_000);
    // Sent before it, the forged 409s would be out by now: they are not.
    const invented = agent.events.filter((e) => e.reconcile?.name === "w99" || e.trace_id === "c3".repeat(16) || e.trace_id === "e5".repeat(16));
    assert.deepEqual(invented, [], "no loss invented from forged spans");
    assert.equal(agent.events.filter((e) => e.cause === "http_rejected").length, 1);
    assert.equal(await agent.metric("lostwrite_span_losses_untrusted_total"), 0, "refused spans are not even looked at");
    console.log(`forged spans (host mode): sent ${tally.sent}, refused ${tally.refused}, accepted ${tally.sent - tally.refused}`);
  });
});
