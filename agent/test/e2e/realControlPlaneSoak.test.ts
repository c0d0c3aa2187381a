// Ten minutes of a normal reconcile load, no fault, on the real control plane
// (testbed/controlplane: etcd and kube-apiserver built from source) with the
// real controller-runtime operator (testbed/cr-operator) followed by the
// agent: widgets' specs change every second, widgets come and go, every
// change is reconciled and its status written. Nothing is lost, so nothing
// may be reported: no loss event, no loss counted, no connection lost — and
// the load must have run (the agent counted the writes, the statuses landed),
// or zero events would prove nothing.
//
// Its own file and time limit: the ten minutes are the point (client-go's
// watches time out and are renewed every 5–10 minutes, the apiserver's
// bookmarks and resyncs come and go, the agent's buffers turn over many times),
// and the files run one after another.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { buildControlPlane } from "../../../testbed/controlplane/build.ts";
import { startControlPlane, type ControlPlane } from "../../../testbed/controlplane/controlPlane.ts";
import { WIDGET_GROUP, WIDGET_VERSION } from "../../../testbed/controlplane/widgets.ts";
import { buildCrOperator } from "../../../testbed/cr-operator/build.ts";
import { goUnavailable } from "../../../testbed/goBuild.ts";
import { startAgentProcess, waitFor, type AgentProcess, type LogLine } from "./support/agentProcess.ts";
import { operatorCmdline, startCrOperator, type CrOperator, type CrOperatorMode } from "./support/crOperator.ts";
import { loggedFor } from "./support/goOperatorFaults.ts";
import { assertKernelRequirements, skipWithoutKernelOrGo } from "./support/kernelRequirements.ts";

/** How long the load runs. */
const LOAD_MS = 10 * 60_000;
/** One spec change per operator per tick: with WIDGETS widgets each one changes every WIDGETS ticks. */
const TICK_MS = 1000;
const WIDGETS = 20;
/** Every this many ticks, each operator's oldest widget is deleted and a new one created. */
const CHURN_EVERY = 15;
const CORRELATION_WINDOW = "2s";
/** Past the correlation window: an event of the last writes would have come by now. */
const SETTLE_MS = 3000;
const OPERATOR_USER = "cr-operator";

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const widgetsPath = (namespace: string): string => `/apis/${WIDGET_GROUP}/${WIDGET_VERSION}/namespaces/${namespace}/widgets`;

interface WidgetList {
  items: { metadata: { name: string; generation: number }; status?: { observedGeneration?: number } }[];
}

describe("the real kube-apiserver, ten minutes of reconciling without a fault: nothing reported", { skip: skipWithoutKernelOrGo(), timeout: 16 * 60_000 }, () => {
  let dir: string;
  let cp: ControlPlane;
  let agent: AgentProcess;
  let agentLog: LogLine[];
  const operators: CrOperator[] = [];

  before(async () => {
    assertKernelRequirements();
    const go = goUnavailable();
    if (go !== null) throw new Error(`e2e test cannot run: ${go}`);
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-realcp-soak-"));
    const log = (line: string): void => console.log(`# ${line}`);
    const binaries = await buildControlPlane(log);
    const binary = await buildCrOperator(dir, { stripped: false });
    cp = await startControlPlane({ binaries, log });
    const { kubeconfigPath } = await cp.kubeconfigFor(OPERATOR_USER);
    agent = await startAgentProcess([
      "--target-cmdline", operatorCmdline(kubeconfigPath),
      "--apiserver", `127.0.0.1:${cp.port}`,
      "--correlation-window", CORRELATION_WINDOW,
      "--span-grace", "0s",
    ]);
    agentLog = agent.log;
    for (const mode of ["careful", "silent"] as CrOperatorMode[]) {
      const namespace = `soak-${mode}`;
      await cp.ensureNamespace(namespace);
      // client-go's defaults throughout (its HTTP/2 health check included): an operator as it ships.
      operators.push(await startCrOperator({ binary, kubeconfigPath, mode, namespace, otlpPort: agent.otlpPort, agentLog }));
    }
  });

  after(async () => {
    if (process.env.CP_E2E_DEBUG) {
      console.error(agent?.stderr.filter((l) => !l.includes("boundary")).join("\n"), JSON.stringify(agent?.events, null, 1));
      for (const op of operators) console.error(`${op.mode} operator:\n${op.stderr.join("")}`);
    }
    for (const op of operators) await op.stop().catch((error: unknown) => console.error(String(error)));
    await agent?.stop();
    await cp?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function createWidget(op: CrOperator, name: string): Promise<void> {
    const res = await cp.request("POST", widgetsPath(op.namespace), {
      body: { apiVersion: `${WIDGET_GROUP}/${WIDGET_VERSION}`, kind: "Widget", metadata: { name }, spec: { size: 1 } },
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
  }

  /** Every widget of `op` whose status has not caught up with its generation. */
  async function behind(op: CrOperator): Promise<string[]> {
    const res = await cp.request("GET", widgetsPath(op.namespace));
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return (res.body as WidgetList).items.filter((w) => w.status?.observedGeneration !== w.metadata.generation).map((w) => w.metadata.name);
  }

  /** The operator's status writes the apiserver answered 2xx: its "status written" log lines. */
  const statusWritesOf = (op: CrOperator): number => op.stderr.join("").split('"msg":"status written"').length - 1;

  // Its own limit: the runner gives every other test five minutes.
  it("10 minutes of spec changes and widgets coming and going, every change's status written: no event, no loss counted, no connection lost", { timeout: 14 * 60_000 }, async () => {
    // Why the real apiserver: what it sends an operator that loses nothing over minutes (watch timeouts and renewals, bookmarks, resourceVersions, APF) is the real one's, and none of it may look like a loss.
    const live = new Map(operators.map((op) => [op, Array.from({ length: WIDGETS }, (_, i) => `w-${i}`)]));
    let created = 0;
    for (const [op, names] of live) {
      for (const name of names) {
        await createWidget(op, name);
        created++;
      }
    }
    await waitFor("every widget's first status to land", async () => (await Promise.all(operators.map(behind))).every((b) => b.length === 0), 60_000);
    const writesBefore = await agent.metric("lostwrite_apiserver_writes_total");
    const answeredBefore = operators.map(statusWritesOf);
    let specChanges = 0;
    let next = WIDGETS;
    const started = Date.now();
    for (let tick = 0; Date.now() - started < LOAD_MS; tick++) {
      const due = started + (tick + 1) * TICK_MS;
      await Promise.all([...live].map(async ([op, names]) => {
        const name = names[tick % names.length]!;
        const res = await cp.request("PATCH", `${widgetsPath(op.namespace)}/${name}`, { contentType: "application/merge-patch+json", body: { spec: { size: tick + 2 } } });
        assert.equal(res.status, 200, JSON.stringify(res.body));
        specChanges++;
        if (tick % CHURN_EVERY === CHURN_EVERY - 1) {
          const gone = names.shift()!;
          assert.equal((await cp.request("DELETE", `${widgetsPath(op.namespace)}/${gone}`)).status, 200);
          const added = `w-${next++}`;
          await createWidget(op, added);
          names.push(added);
          created++;
        }
      }));
      // Pacing, not waiting for anything: the load's rate (one change per operator per tick) is the point.
      await sleep(Math.max(0, due - Date.now()));
    }
    const loadSeconds = (Date.now() - started) / 1000;
    await waitFor("every widget's latest status to land", async () => (await Promise.all(operators.map(behind))).every((b) => b.length === 0), 60_000);
    await sleep(SETTLE_MS); // past the correlation window: an event of the last writes would have come by now, and must not

    const answered = operators.reduce((sum, op, i) => sum + statusWritesOf(op) - answeredBefore[i]!, 0);
    const writes = (await agent.metric("lostwrite_apiserver_writes_total")) - writesBefore;
    const lost = await agent.metric("lostwrite_status_write_lost_total");
    const connectionLosses = await agent.metric("lostwrite_apiserver_connection_losses_total");
    console.log(`# ${loadSeconds.toFixed(0)} s of load: ${specChanges} spec changes, ${created} widgets created, ` +
      `${answered} status writes answered (the operators' logs), ${writes} requests counted by the agent; ` +
      `${agent.events.length} events, ${lost} losses counted, ${connectionLosses} connections lost`);
    assert.ok(loadSeconds * 1000 >= LOAD_MS, "the load ran its ten minutes");
    assert.ok(answered >= specChanges, `every spec change's status was written (${answered} writes answered for ${specChanges} changes)`);
    assert.ok(writes >= answered, `the agent counted the operators' requests (${writes}), the status writes among them (${answered})`);
    assert.equal(await agent.metric("lostwrite_go_probe_restarts_total"), 0,
      `no Go probe restart: ${JSON.stringify(agentLog.filter((l) => l.msg.endsWith("; restarting")))}`);
    for (const op of operators) assert.ok(!loggedFor(agentLog, "Go probe no longer follows", op.pid), `the Go probe followed the ${op.mode} operator throughout`);
    assert.deepEqual(agent.events, [], "no event");
    assert.equal(lost, 0, "no status loss counted");
    assert.equal(connectionLosses, 0, "no apiserver connection lost");
  });
});
