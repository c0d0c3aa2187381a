// CLI entry: node testbed/controlplane/main.ts [--port 6443] [--build-only]
// Builds etcd and kube-apiserver (cached), starts them on loopback with the
// Widget CRD installed, prints one JSON line with the addresses and the admin
// kubeconfig, then runs until SIGINT/SIGTERM, when it stops both and removes
// its directory.
import { Command, InvalidArgumentError } from "commander";
import { buildControlPlane } from "./build.ts";
import { startControlPlane } from "./controlPlane.ts";

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError(`expected a port 0-65535, got ${JSON.stringify(value)}`);
  return n;
}

const program = new Command("controlplane")
  .description("etcd and kube-apiserver built from source, on 127.0.0.1, with the Widget CRD")
  .option("--port <n>", "the apiserver's HTTPS port (0: any free port)", port, 0)
  .option("--build-only", "build (or find in the cache) both binaries, print their paths and exit")
  .parse();

const flags = program.opts<{ port: number; buildOnly?: boolean }>();
const log = (line: string): void => console.error(`controlplane: ${line}`);
const binaries = await buildControlPlane(log);
if (flags.buildOnly) {
  console.log(JSON.stringify({ etcd: binaries.etcd, kubeApiserver: binaries.kubeApiserver }));
  process.exit(0);
}
const cp = await startControlPlane({ binaries, port: flags.port || undefined, log });
console.log(JSON.stringify({ url: cp.url, kubeconfig: cp.adminKubeconfigPath, ca: cp.caPath, dir: cp.dir, logs: cp.logs, apiserverPid: cp.apiserverPid() }));

const stop = (): void => {
  cp.stop().then(() => process.exit(0), (error: unknown) => {
    console.error(error);
    process.exit(1);
  });
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
