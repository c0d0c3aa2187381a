// The kubeconfig clients use to reach the testbed apiserver. The CA is embedded
// so the file keeps working when copied elsewhere; the token is accepted but
// not checked (the testbed does no authentication).
import { writeFile } from "node:fs/promises";
import { stringify } from "yaml";

interface KubeconfigOptions {
  url: string;
  caPem: string;
  namespace?: string;
}

const TESTBED_TOKEN = "lostwrite-testbed";

function renderKubeconfig(opts: KubeconfigOptions): string {
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{
      name: "testbed",
      cluster: { server: opts.url, "certificate-authority-data": Buffer.from(opts.caPem).toString("base64") },
    }],
    users: [{ name: "testbed", user: { token: TESTBED_TOKEN } }],
    contexts: [{ name: "testbed", context: { cluster: "testbed", user: "testbed", namespace: opts.namespace ?? "default" } }],
    "current-context": "testbed",
    preferences: {},
  });
}

export async function writeKubeconfig(filePath: string, opts: KubeconfigOptions): Promise<void> {
  await writeFile(filePath, renderKubeconfig(opts), { mode: 0o600 });
}
