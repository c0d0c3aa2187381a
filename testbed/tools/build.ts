// `npm run tools`: builds the tools the tests run that are not in their cache
// yet, one after the other, and prints each one's version: Prometheus 3,
// promtool, Alertmanager and amtool (testbed/tools/moduleTools.ts), helm v4
// (testbed/helm), and etcd with kube-apiserver (testbed/controlplane). `npm test` runs it first, so that a cold build (minutes:
// see testbed/README.md) never counts against a test file's time limit; a
// warm run costs nothing.
import { execFileSync } from "node:child_process";
import { buildControlPlane } from "../controlplane/build.ts";
import { helmBinary } from "../helm/helm.ts";
import { buildModuleTool, MODULE_TOOLS } from "./moduleTools.ts";

const log = (line: string): void => console.error(`tools: ${line}`);
const firstLine = (binary: string, args: string[]): string =>
  execFileSync(binary, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).split("\n")[0]!;

for (const tool of Object.values(MODULE_TOOLS)) {
  const binary = await buildModuleTool(tool, log);
  log(`${binary}: ${firstLine(binary, ["--version"])}`);
}
const helm = await helmBinary(log);
log(`${helm}: ${firstLine(helm, ["version", "--short"])}`);
const controlPlane = await buildControlPlane(log);
log(`${controlPlane.etcd}: ${firstLine(controlPlane.etcd, ["--version"])}`);
log(`${controlPlane.kubeApiserver}: ${firstLine(controlPlane.kubeApiserver, ["--version"])}`);
