// The Go request path on every cell of the Go × x/net matrix (testbed/go-matrix:
// Debian's Go 1.19 with its x/net 0.7.0, Go 1.26 with x/net 0.30, 0.43, 0.53
// and 0.63, Go 1.27 with x/net 0.63, plain and -tags http2legacy): the testbed
// operator of each cell, through each of its two clients (golang.org/x/net's
// Transport, as client-go configures it, and net/http's), under the faults
// every variant must get right — a reset and a close while its watch streams,
// a 409, a stream reset, a hung write its client times out — each reported exactly once, by
// path, from the uprobes. goLayoutMatrix checks the same cells' offsets
// against their DWARF; this checks that the verdicts come out of them.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { startApiserver, type Apiserver } from "../../../testbed/apiserver/apiserver.ts";
import { buildCell } from "../../../testbed/go-matrix/buildCell.ts";
import { MATRIX_CELLS } from "../../../testbed/go-matrix/cells.ts";
import { cellSkip, cellToolchainMissing } from "../../../testbed/go-matrix/cellToolchain.ts";
import { goUnavailable } from "../../../testbed/goBuild.ts";
import { inspectGoBinary } from "../../src/sources/goBinary/inspectGoBinary.ts";
import { startAgentProcess, type AgentProcess, type LogLine } from "./support/agentProcess.ts";
import { goOperatorFaults, type FaultRow, type GoOperatorFaults, type OperatorClient } from "./support/goOperatorFaults.ts";
import { assertKernelRequirements, skipWithoutKernelOrGo } from "./support/kernelRequirements.ts";

describe("Go request verdicts on every cell of the Go × x/net matrix", { skip: skipWithoutKernelOrGo(), timeout: 590_000 }, () => {
  let dir: string;
  let api: Apiserver;
  let agent: AgentProcess;
  let agentLog: LogLine[];
  let faults: GoOperatorFaults;
  const table: (FaultRow & { cell: string; client: string; families: string })[] = [];

  before(async () => {
    assertKernelRequirements();
    const go = goUnavailable();
    if (go !== null) throw new Error(`e2e test cannot run: ${go}`);
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-go-matrix-faults-"));
    api = await startApiserver({ dir });
    agent = await startAgentProcess([
      "--target-comm", "^go-operator",
      "--apiserver", `127.0.0.1:${api.port}`,
      "--correlation-window", "2s",
      // Each client is a new process whose first write is its first fault:
      // its losses wait for its first spans rather than race them.
      "--span-grace", "60s",
    ]);
    agentLog = agent.log;
    faults = goOperatorFaults(api, agent, agentLog);
  });

  after(async () => {
    if (process.env.GO_E2E_DEBUG) console.error(agent?.stderr.filter((l) => !l.includes("boundary")).join("\n"), JSON.stringify(agent?.events, null, 1));
    if (table.length > 0) {
      console.log(`# Go × x/net matrix: expected vs detected, one event each\n${table.map((r) => `#   ${r.cell}\t${r.client} (${r.families})\t${r.fault}\texpected: ${r.expected}\tdetected: ${r.detected}`).join("\n")}`);
    }
    await agent?.stop();
    await api?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  for (const cell of MATRIX_CELLS) {
    it(`${cell.id}: reset, close, 409, RST_STREAM and a hung write through both of its clients, each once, by path`, { skip: cellSkip(cell), timeout: 240_000 }, async () => {
      const missing = cellToolchainMissing(cell);
      if (missing !== null) throw new Error(`e2e test cannot run: ${missing}`);
      const build = await buildCell(cell);
      // Debian's GOPATH build records no x/net version: only its DWARF tells the
      // layout of its x/net client, so its build with symbols is the one followed.
      const binary = cell.toolchain.kind === "debian" ? build.symbols : build.stripped;
      const report = await inspectGoBinary(binary);
      if (!report.ok) assert.fail(`${cell.id}: ${report.reason}`);
      const families = report.families.map((f) => f.name).join(", ");
      for (const client of ["xnet", "std"] as const satisfies readonly OperatorClient[]) {
        const op = await faults.startOperator(binary, client, `${cell.id.replace(/[^a-z0-9]+/g, "-")}-${client}`);
        try {
          for (const row of await faults.coreVerdicts(op)) table.push({ ...row, cell: cell.id, client, families });
        } finally {
          await op.stop().catch((error: unknown) => console.error(String(error)));
        }
      }
    });
  }
});
