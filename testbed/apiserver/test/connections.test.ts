// The listener's own lifecycle: closing it while a connection is still
// sending its FIN lets the process exit (a reset refused by libuv during a
// shutdown used to leave the socket's handle open forever, and Node spun at
// exit).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { describe, it } from "node:test";

const connectionsUrl = new URL("../connections.ts", import.meta.url).href;

// The client sends FIN; the server's socket answers with its own end() (no
// half-open sockets), and right then, before that shutdown is done, the
// listener closes (in the e2e tests: the agent exits, and the test's clean-up
// closes the apiserver in the same turn of the event loop).
const script = `
import net from "node:net";
import tls from "node:tls";
import { Listener } from ${JSON.stringify(connectionsUrl)};
const listener = new Listener({ host: "127.0.0.1", port: 0, secureContext: tls.createSecureContext(), onSecureConnection: () => undefined });
await listener.listen();
const client = net.connect(listener.port, "127.0.0.1");
client.on("error", () => undefined);
client.resume();
while (listener.connections().length === 0) await new Promise((r) => setTimeout(r, 10));
const raw = listener.connections()[0].raw;
const end = raw.end;
raw.end = function (...args) {
  raw.end = end;
  end.apply(raw, args);
  console.log(raw.writableEnded && !raw.writableFinished ? "closing during shutdown" : "missed the shutdown window");
  void listener.close().then(() => console.log("listener closed"));
  return raw;
};
client.end();
`;

void describe("Listener", () => {
  void it("closing it while a connection's FIN is being sent lets the process exit", async () => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    let stdout = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.once("exit", (c, s) => resolve([c, s])));
    clearTimeout(timer);
    assert.match(stdout, /closing during shutdown/);
    assert.match(stdout, /listener closed/);
    assert.deepEqual([code, signal], [0, null], `the process did not exit by itself: ${stdout}`);
  });
});
