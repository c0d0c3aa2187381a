// Reading the apiserver's address and credentials: kubeconfig files as
// kubectl writes them, the pod's ServiceAccount, and what is refused.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { fromServiceAccount, loadApiAccess } from "../../../../../src/sources/targets/kubernetes/apiAccess.ts";

const CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

async function tempDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "lostwrite-access-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

function kubeconfig(user: Record<string, unknown>, cluster: Record<string, unknown> = { server: "https://10.0.0.1:6443" }, currentContext = "ctx"): string {
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "c", cluster }],
    users: [{ name: "u", user }],
    contexts: [{ name: "ctx", context: { cluster: "c", user: "u" } }],
    "current-context": currentContext,
  });
}

void test("a kubeconfig's current context: server, CA data and token", async (t) => {
  const dir = await tempDir(t);
  const file = join(dir, "config");
  await writeFile(file, kubeconfig({ token: "abc" }, { server: "https://10.0.0.1:6443/", "certificate-authority-data": Buffer.from(CA).toString("base64") }));
  const access = loadApiAccess(file);
  assert.equal(access.server, "https://10.0.0.1:6443");
  assert.equal(access.ca?.toString(), CA);
  assert.equal(access.token, "abc");
  assert.equal(access.source, `kubeconfig ${file}`);
});

void test("files a kubeconfig names are read relative to its own directory", async (t) => {
  const dir = await tempDir(t);
  await mkdir(join(dir, "pki"));
  await writeFile(join(dir, "pki", "ca.crt"), CA);
  await writeFile(join(dir, "pki", "client.crt"), "CERT");
  await writeFile(join(dir, "pki", "client.key"), "KEY");
  const file = join(dir, "config");
  await writeFile(
    file,
    kubeconfig({ "client-certificate": "pki/client.crt", "client-key": "pki/client.key", tokenFile: "pki/token" }, { server: "https://api:6443", "certificate-authority": "pki/ca.crt" }),
  );
  const access = loadApiAccess(file);
  assert.equal(access.ca?.toString(), CA);
  assert.equal(access.cert?.toString(), "CERT");
  assert.equal(access.key?.toString(), "KEY");
  assert.equal(access.tokenFile, join(dir, "pki", "token"));
});

void test("what cannot be used is refused with the file and key named", async (t) => {
  const dir = await tempDir(t);
  const file = join(dir, "config");
  const refused = async (text: string, message: RegExp): Promise<void> => {
    await writeFile(file, text);
    assert.throws(() => loadApiAccess(file), message);
  };
  await refused(kubeconfig({ exec: { command: "aws", apiVersion: "client.authentication.k8s.io/v1" } }), /kubeconfig .*config: users\[u\]\.user\.exec: not supported/);
  await refused(kubeconfig({ token: "x" }, { server: "https://a:1" }, "elsewhere"), /current-context "elsewhere" names no context/);
  await refused(kubeconfig({ token: "x" }, { server: "not a url" }), /kubeconfig .*config: clusters\.0\.cluster\.server/);
  await refused(kubeconfig({ "client-certificate-data": "Q0VSVA==" }), /a client certificate needs its key/);
  await refused(kubeconfig({ token: "x" }, { server: "https://a:1", "certificate-authority": "missing.crt" }), /certificate-authority ".*missing\.crt": ENOENT/);
  await refused("clusters: [unclosed", /kubeconfig .*config: /);
});

void test("in a pod: the Service address from the environment, the mounted token (read per request) and CA", async (t) => {
  const dir = await tempDir(t);
  await writeFile(join(dir, "token"), "jwt");
  await writeFile(join(dir, "ca.crt"), CA);
  const access = fromServiceAccount({ KUBERNETES_SERVICE_HOST: "fd00::1", KUBERNETES_SERVICE_PORT: "443" }, dir);
  assert.equal(access.server, "https://[fd00::1]:443");
  assert.equal(access.tokenFile, join(dir, "token"));
  assert.equal(access.token, undefined);
  assert.equal(access.ca?.toString(), CA);
  assert.throws(() => fromServiceAccount({}, dir), /not in a pod \(KUBERNETES_SERVICE_HOST is not set\): pass --kubeconfig/);
  assert.throws(() => fromServiceAccount({ KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "https" }, dir), /KUBERNETES_SERVICE_PORT "https" is not a port/);
  assert.throws(() => fromServiceAccount({ KUBERNETES_SERVICE_HOST: "10.96.0.1" }, join(dir, "none")), /token is missing: is automountServiceAccountToken off\?/);
});
