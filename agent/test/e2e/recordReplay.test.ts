// `--record` then `lostwrite replay`: the recording of a live run on the real
// kernel replays, without root or bpftrace, to byte-identical loss events.
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { freePort, startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { assertKernelRequirements, skipWithoutKernel } from "./support/kernelRequirements.ts";

const here = path.dirname(fileURLToPath(import.meta.url));
const CLIENT = path.join(here, "clients/lw_client.py");
const repoRoot = path.resolve(here, "../../..");

async function runWatchedClient(agent: AgentProcess, binary: string, mode: string, port: number): Promise<void> {
  const child = spawn(binary, [CLIENT, mode, "127.0.0.1", String(port)], { stdio: ["pipe", "ignore", "inherit"] });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  try {
    await waitFor("the agent to watch the client", () => agent.stderr.some((l) => l.includes(`lw-client[${child.pid}]`)), 5000);
  } catch (err) {
    child.kill("SIGKILL");
    throw err;
  }
  child.stdin.end("go\n");
  await exited;
}

describe("record and replay", { skip: skipWithoutKernel(), timeout: 120_000 }, () => {
  let dir: string;
  let agent: AgentProcess;
  let server: net.Server;

  before(() => {
    assertKernelRequirements();
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-replay-"));
  });

  after(async () => {
    await agent?.stop();
    server?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("replays a recorded live session to the same events, byte for byte", async () => {
    const python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
    const client = path.join(dir, "lw-client");
    symlinkSync(python, client);
    server = net.createServer((socket) => {
      socket.on("error", () => undefined);
      socket.on("data", (data) => data.includes("RESET") && socket.resetAndDestroy());
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as net.AddressInfo).port;
    const refused = await freePort();
    const recording = path.join(dir, "session.jsonl");
    agent = await startAgentProcess([
      "--target-comm", "^lw-client$",
      "--apiserver", `127.0.0.1:${port}`,
      "--apiserver", `127.0.0.1:${refused}`,
      "--correlation-window", "500ms",
      "--record", recording,
    ]);
    await runWatchedClient(agent, client, "plain_reset", port);
    await runWatchedClient(agent, client, "refused", refused);
    await waitFor("two loss events", () => agent.events.length >= 2);
    await new Promise((r) => setTimeout(r, 1000)); // nothing more is coming
    await agent.stop();

    const live = agent.events.map((e) => JSON.stringify(e));
    // The second failed send is on the same dead socket: counted, not a loss of its own.
    assert.deepEqual(agent.events.map((e) => e.cause), ["write_failed", "connect_failed"], "the first failed send and one refused connect");
    // Replay as an unprivileged user would: no root needed, no bpftrace run.
    const replayed = execFileSync(path.join(repoRoot, "node_modules/.bin/node"), [path.join(repoRoot, "agent/src/cli.ts"), "replay", "--json", recording], {
      encoding: "utf8",
      env: { ...process.env, PATH: "/usr/bin:/bin" },
    })
      .split("\n")
      .filter(Boolean);
    assert.deepEqual(replayed, live);
    assert.ok(readFileSync(recording, "utf8").split("\n").some((l) => l.includes('"kind":"probe"')));
  });
});
