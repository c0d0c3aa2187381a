// The first request on a new TLS connection, on the real kernel: a status
// PATCH written right after the handshake, read by a server on Go's
// crypto/tls and net/http (the apiserver's stacks) and then reset or closed
// unanswered, must be one loss event, from python's ssl and from Node's tls
// over HTTP/1.1 and from Node's HTTP/2 client, over TLS 1.2 and TLS 1.3.
// Nothing of the handshake, and nothing the HTTP/2 server sends on its own
// (its SETTINGS cross the request on the wire), may count as its answer.
// Against two servers: one that asks for no client certificate, and one that
// does, as an apiserver with a client CA does. That one's TLS 1.3 session
// ticket comes once the client's second flight is read, after the request
// (always for Node's tls, which writes its Finished and the request in one
// send): on the wire it looks like the answer. The agent's TLS programs read
// what SSL_read handed the client instead.
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { buildGoTlsServer } from "../../../testbed/go-tls-server/build.ts";
import { repoPath } from "../repoPath.ts";
import { startAgentProcess, waitFor, type AgentProcess } from "./support/agentProcess.ts";
import { daemonSetShape, inDeployedShape } from "./support/deployedShape.ts";
import { assertKernelRequirements, skipWithoutKernelOrGo } from "./support/kernelRequirements.ts";

const CLIENTS = path.join(path.dirname(fileURLToPath(import.meta.url)), "clients");
const NODE = path.resolve(CLIENTS, "../../../../node_modules/.bin/node");

const SERVERS = ["no-client-cert", "client-cert"] as const;
type Server = (typeof SERVERS)[number];

interface Outcome {
  step: string;
  tls: string;
  read?: number;
  error?: string | null;
  errno?: string | null;
}

describe("the first request on a fresh TLS connection, on the real kernel", { skip: skipWithoutKernelOrGo(), timeout: 480_000 }, () => {
  let dir: string;
  const servers: ChildProcess[] = [];
  const ports = new Map<Server, number>();
  let agent: AgentProcess;
  let python: string;

  before(async () => {
    assertKernelRequirements();
    dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-fresh-tls-"));
    python = execFileSync("python3", ["-c", "import sys; print(sys.executable)"], { encoding: "utf8" }).trim();
    const binary = await buildGoTlsServer(dir);
    for (const kind of SERVERS) {
      const server = spawn(binary, kind === "client-cert" ? ["-request-client-cert"] : [], { stdio: ["ignore", "pipe", "inherit"] });
      servers.push(server);
      ports.set(
        kind,
        await new Promise<number>((resolve, reject) => {
          let out = "";
          server.stdout.on("data", (chunk: Buffer) => {
            out += chunk.toString();
            const match = /"port":(\d+)/.exec(out);
            if (match) resolve(Number(match[1]));
          });
          server.once("exit", (code) => reject(new Error(`go-tls-server exited ${code}`)));
        }),
      );
    }
    // Every client carries "fresh_tls" or "fresh_h2" in its command line; the agent follows them from exec.
    agent = await startAgentProcess([...agentArgs(), "--record", recording()]);
  });

  const recording = (): string => path.join(dir, "fresh-tls.jsonl");
  const agentArgs = (): string[] => [
    "--target-cmdline", "fresh_(tls|h2)",
    ...[...ports.values()].flatMap((port) => ["--apiserver", `127.0.0.1:${port}`]),
    "--correlation-window", "500ms",
  ];

  after(async () => {
    if (process.env.TLS_E2E_DEBUG) console.error(agent?.stderr.join("\n"));
    for (const server of servers) server.kill();
    await agent?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** Runs one client until it reports; it acts once the agent watches it. */
  async function runClient(command: string, args: string[], watcher: AgentProcess = agent): Promise<{ pid: number; outcome: Outcome }> {
    const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
    await waitFor(`the agent to watch ${command} [${child.pid}]`, () => watcher.stderr.some((l) => l.includes(`[${child.pid}]`) && l.includes("targets changed")));
    // And to read its OpenSSL: python's libssl, node's own.
    await waitFor(`the TLS probe of ${command} to follow [${child.pid}]`, () => watcher.stderr.some((l) => l.includes(`"msg":"TLS probe follows","pid":${child.pid},`)));
    child.stdin.write("go\n");
    child.stdin.end();
    assert.equal(await exited, 0, `client failed: ${out}`);
    return { pid: child.pid!, outcome: JSON.parse(out.trim().split("\n").at(-1)!) as Outcome };
  }

  const cases = [
    { client: "python ssl", version: "1.3" },
    { client: "python ssl", version: "1.2" },
    { client: "node tls", version: "1.3" },
    { client: "node tls", version: "1.2" },
    { client: "node http2", version: "1.3" },
    { client: "node http2", version: "1.2" },
  ] as const;
  const expected = { reset: "connection_reset", close: "connection_closed_unanswered" } as const;

  for (const kind of SERVERS) for (const { client, version } of cases) {
    for (const action of ["reset", "close"] as const) {
      it(`${client}, TLS ${version}, ${kind === "client-cert" ? "a server asking for a client certificate" : "a server asking for none"}: a status write the server ${action === "reset" ? "resets" : "closes"} unanswered is one ${expected[action]}`, async () => {
        const port = ports.get(kind)!;
        const { pid, outcome } =
          client === "python ssl"
            ? await runClient(python, [path.join(CLIENTS, "lw_client.py"), "fresh_tls", "127.0.0.1", String(port), version, action])
            : await runClient(NODE, [path.join(CLIENTS, client === "node tls" ? "lw_fresh_tls.ts" : "lw_fresh_h2.ts"), String(port), version, action]);
        assert.equal(outcome.tls, `TLSv${version}`, JSON.stringify(outcome));
        assert.ok(!outcome.read, `the server never answered: ${JSON.stringify(outcome)}`);
        await waitFor("the loss event", () => agent.events.some((e) => e.pid === pid));
        await new Promise((r) => setTimeout(r, 1000));
        const events = agent.events.filter((e) => e.pid === pid);
        // An HTTP/2 client answers the server's SETTINGS; when that ACK is
        // still unread at the server's close(), its kernel resets instead of
        // sending a FIN, and the client sees a reset: one loss either way.
        const allowed: string[] = client === "node http2" && action === "close" ? [expected.close, expected.reset] : [expected[action]];
        assert.equal(events.length, 1, JSON.stringify(events));
        assert.ok(allowed.includes(events[0]!.cause), JSON.stringify(events));
        // The request and, from a client that sent it in the same write, its Finished: never less than the request.
        assert.ok(events[0]!.unanswered_bytes! >= 400, `unanswered ${events[0]!.unanswered_bytes} bytes`);
      });
    }
  }
  it("one libssl, two clients: when the first exits, the same program goes on following the second, not restarted, and judges its request", async () => {
    const start = (action: "reset" | "close"): { child: ChildProcess; exited: Promise<number | null> } => {
      const child = spawn(python, [path.join(CLIENTS, "lw_client.py"), "fresh_tls", "127.0.0.1", String(ports.get("client-cert")), "1.3", action], { stdio: ["pipe", "ignore", "inherit"] });
      return { child, exited: new Promise((resolve) => child.once("exit", resolve)) };
    };
    const first = start("close");
    const second = start("reset");
    const follows = (pid: number): boolean => agent.stderr.some((l) => l.includes(`"msg":"TLS probe follows","pid":${pid},`));
    await waitFor("one TLS program following both clients", () => follows(first.child.pid!) && follows(second.child.pid!), 20_000);
    const before = agent.stderr.length;
    first.child.stdin!.end("go\n");
    assert.equal(await first.exited, 0);
    await waitFor("the agent to let the first client go", () => agent.stderr.some((l) => l.includes(`"msg":"TLS probe no longer follows","pid":${first.child.pid},`)), 20_000);
    // Attached through the agent's own descriptor on the library: the first client's exit takes nothing away.
    assert.deepEqual(agent.stderr.slice(before).filter((l) => /TLS probe (attached|detached)/.test(l)), [], "no program restarted");
    second.child.stdin!.end("go\n");
    assert.equal(await second.exited, 0);
    await waitFor("the second client's loss", () => agent.events.some((e) => e.pid === second.child.pid));
    await new Promise((r) => setTimeout(r, 1000));
    assert.deepEqual(agent.events.filter((e) => e.pid === second.child.pid).map((e) => e.cause), ["connection_reset"]);
  });

  it("in the DaemonSet's shape (own PID namespace, host /proc, the manifest's capabilities): node's TLS 1.3 request reset after the ticket is one connection_reset", async () => {
    const shape = daemonSetShape();
    const shaped = await startAgentProcess(agentArgs(), { LOSTWRITE_PROC_ROOT: shape.procRoot }, { wrap: (argv) => inDeployedShape(argv, shape) });
    try {
      const { pid } = await runClient(NODE, [path.join(CLIENTS, "lw_fresh_tls.ts"), String(ports.get("client-cert")), "1.3", "reset"], shaped);
      await waitFor("the shaped agent's loss event", () => shaped.events.some((e) => e.pid === pid));
      await new Promise((r) => setTimeout(r, 1000));
      const events = shaped.events.filter((e) => e.pid === pid);
      assert.deepEqual(events.map((e) => e.cause), ["connection_reset"], JSON.stringify(events));
    } finally {
      await shaped.stop();
    }
  });

  it("--record, then replay: the session replays to the same events, TLS verdicts and all", async () => {
    await agent.stop();
    const live = agent.events.map((e) => JSON.stringify(e));
    assert.ok(live.length >= 24, `live events: ${live.length}`);
    const replayed = execFileSync(repoPath("node_modules/.bin/node"), [repoPath("agent/src/cli.ts"), "replay", "--json", recording()], {
      encoding: "utf8",
      env: { ...process.env, PATH: "/usr/bin:/bin" },
    })
      .split("\n")
      .filter(Boolean);
    const first = replayed.findIndex((line, i) => line !== live[i]);
    if (first !== -1 || replayed.length !== live.length) {
      if (process.env.TLS_E2E_DEBUG) execFileSync("cp", [recording(), "/tmp/fresh-tls-debug.jsonl"]);
      const at = first === -1 ? live.length : first;
      assert.fail(`replay differs from event ${at} of ${live.length}:\nlive     ${live[at] ?? "(none)"}\nreplayed ${replayed[at] ?? "(none)"}`);
    }
  });
});
