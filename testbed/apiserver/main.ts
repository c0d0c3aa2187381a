// CLI entry: node testbed/apiserver/main.ts --port 6443 --dir /tmp/testbed [--scenario faults.yaml]
// Prints one JSON line with the addresses once it is up, then runs until SIGINT/SIGTERM.
import { mkdtemp } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Command, InvalidArgumentError } from "commander";
import { startApiserver } from "./apiserver.ts";

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError(`expected a port 0-65535, got ${JSON.stringify(value)}`);
  return n;
}

function loopback(value: string): string {
  if (!["127.0.0.1", "::1", "localhost"].includes(value) && !value.startsWith("127.")) {
    throw new InvalidArgumentError(`the testbed listens on loopback only (127.0.0.0/8 or ::1), got ${JSON.stringify(value)}`);
  }
  return value === "localhost" ? "127.0.0.1" : value;
}

const program = new Command("testbed-apiserver")
  .description("Kubernetes apiserver stand-in with fault injection (widgets.demo.lostwrite.dev, pods, EndpointSlices)")
  .option("--host <addr>", "loopback address to listen on", loopback, "127.0.0.1")
  .option("--port <n>", "HTTPS port (0: any free port)", port, 0)
  .option("--control-port <n>", "control API port on 127.0.0.1 (0: any free port)", port, 0)
  .option("--dir <path>", "where certificates, kubeconfig and faults.jsonl go (default: a new temp dir)")
  .option("--scenario <file>", "YAML scenario whose fault rules are armed at start")
  .parse();

const flags = program.opts<{ host: string; port: number; controlPort: number; dir?: string; scenario?: string }>();
const dir = flags.dir ?? (await mkdtemp(path.join(os.tmpdir(), "lostwrite-testbed-")));
const server = await startApiserver({ host: flags.host, port: flags.port, controlPort: flags.controlPort, dir, scenario: flags.scenario });
console.log(JSON.stringify({ url: server.url, kubeconfig: server.kubeconfigPath, ca: server.caPath, control: server.controlUrl, faultLog: path.join(dir, "faults.jsonl") }));

const stop = (): void => {
  server.close().then(() => process.exit(0), (error: unknown) => {
    console.error(error);
    process.exit(1);
  });
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
