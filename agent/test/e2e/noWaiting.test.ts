// On the real kernel: a loss of a process that sends no spans is on /events
// at once, not after the correlation window; a process that sends spans
// still has its loss wait for them. The window here is 10 s, as deployed, so
// "at once" and "after the window" cannot be confused.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import type { LossEvent } from "../../src/model.ts";
import { startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { NamedClients, type HttpsClient } from "./support/httpsClient.ts";
import { assertKernelRequirements, skipWithoutKernel } from "./support/kernelRequirements.ts";

const WINDOW_MS = 10_000;
const WIDGETS = "/apis/demo.lostwrite.dev/v1/namespaces";

describe("no waiting for spans that never come", { skip: skipWithoutKernel(), timeout: 120_000 }, () => {
  let dir: string;
  let api: Apiserver;
  let agent: AgentProcess;
  let clients: NamedClients | undefined;
  const client = (comm: string): HttpsClient => clients!.client(comm);

  before(async () => {
    assertKernelRequirements();
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-nowait-"));
    api = await startApiserver({ dir });
    clients = new NamedClients(api.port, 1.5);
    agent = await startAgentProcess([
      "--target-comm", "^lwn-",
      "--apiserver", `127.0.0.1:${api.port}`,
      "--correlation-window", `${WINDOW_MS}ms`,
      // No grace: a target counts as sending no spans from the start.
      "--span-grace", "0s",
    ]);
  });

  after(async () => {
    clients?.close();
    await agent?.stop();
    await api?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** Resets `c`'s status PATCH; resolves with the event and how long after the fault it was logged. */
  async function lose(c: HttpsClient, name: string): Promise<{ event: LossEvent; afterMs: number }> {
    await c.watchedBy(agent);
    await c.run("connect");
    api.control.addRule({ id: `reset-${name}`, method: "PATCH", path: `${WIDGETS}/${name}/*/status`, action: "reset", afterBytes: 100 });
    const sentAt = Date.now();
    await c.run(`request PATCH ${WIDGETS}/${name}/widgets/w1/status 500`);
    await waitFor(`the loss of ${c.comm}`, () => agent.events.some((e) => e.pid === c.pid), WINDOW_MS + 5000);
    return { event: agent.events.find((e) => e.pid === c.pid)!, afterMs: Date.now() - sentAt };
  }

  it("a process that has sent no span: its loss is reported well before the window ends", async () => {
    const { event, afterMs } = await lose(client("lwn-quiet"), "quiet");
    assert.equal(event.cause, "connection_reset");
    assert.equal(event.correlation, "none");
    assert.ok(afterMs < WINDOW_MS / 2, `reported ${afterMs} ms after the fault; the window is ${WINDOW_MS} ms`);
  });

  it("a process that sends spans: its loss waits for them (here none explains it: the whole window)", async () => {
    const c = client("lwn-traced");
    await c.watchedBy(agent);
    // One span of its own, from the process itself (a span is its sender's), as any traced operator sends.
    const sent = await c.run(`span 127.0.0.1 ${agent.otlpPort}`);
    assert.equal(sent.status, 200, String(sent.text));
    const { event, afterMs } = await lose(c, "traced");
    assert.equal(event.correlation, "none");
    assert.ok(afterMs >= WINDOW_MS - 1000, `reported ${afterMs} ms after the fault: it should have waited for spans`);
  });
});
