// A real Kubernetes control plane on loopback: etcd and kube-apiserver built
// from source (build.ts), started as controller-runtime's envtest starts them
// (pkg/internal/testing/controlplane: etcd with one member and no fsync; the
// apiserver with its etcd, its certificates, a service-account issuer and
// keys, client certificates checked against a CA, RBAC), with the Widget CRD
// installed and an admin kubeconfig written. Each runs in its own process
// group, which stop() kills before it removes the directory.
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import https from "node:https";
import os from "node:os";
import path from "node:path";
import { stringify } from "yaml";
import { freeLoopbackPort } from "../../agent/src/loopbackPort.ts";
import { buildControlPlane, type ControlPlaneBinaries } from "./build.ts";
import { generateClientCertificate, generateControlPlaneCertificates, type Identity, type KeyPair } from "./certificates.ts";
import { OPERATOR_GROUP, WIDGET_GROUP, WIDGET_VERSION, operatorClusterRole, operatorClusterRoleBinding, widgetCrd } from "./widgets.ts";

const HOST = "127.0.0.1";
/** How long etcd, then the apiserver, may take to answer ready (a cold start on a busy 2-core machine takes seconds). */
const READY_TIMEOUT_MS = 120_000;

export interface ApiResponse {
  status: number;
  body: unknown;
  headers: Record<string, string | string[] | undefined>;
}

export interface RequestOptions {
  body?: unknown;
  /** Default application/json; a PATCH says which patch it is. */
  contentType?: string;
  /** Another identity's client certificate (default: the admin's). */
  as?: KeyPair;
  timeoutMs?: number;
}

export interface ControlPlane {
  /** https://127.0.0.1:PORT */
  url: string;
  host: string;
  port: number;
  dir: string;
  caPath: string;
  caPem: string;
  /** The apiserver's serving certificate; a webhook on loopback may serve it too. */
  serving: KeyPair;
  /** system:masters: every request allowed, exempt from API Priority and Fairness. */
  adminKubeconfigPath: string;
  admin: KeyPair;
  /** A kubeconfig for a user of the operators' group (the Widget RBAC applies; APF's flow schemas apply too). */
  kubeconfigFor(name: string, identity?: Partial<Identity>): Promise<{ kubeconfigPath: string; client: KeyPair; identity: Identity }>;
  /** One request as the admin (or `as`): the JSON body parsed when it is JSON. */
  request(method: string, apiPath: string, opts?: RequestOptions): Promise<ApiResponse>;
  /** Creates an object (POST to `collectionPath`); an existing one is fine. Throws on any other failure. */
  create(collectionPath: string, object: unknown): Promise<unknown>;
  ensureNamespace(name: string): Promise<void>;
  /** The apiserver's pid (its process group's id). */
  apiserverPid(): number;
  /** Sends `signal` to the apiserver's process group and waits until it has exited. */
  killApiserver(signal?: NodeJS.Signals): Promise<void>;
  /**
   * Starts the apiserver again on the same port, etcd and certificates, with
   * `flags` (`--name=value`) added to this start's command line only; resolves
   * once it is ready.
   */
  startApiserver(flags?: readonly string[]): Promise<void>;
  /** Where each process writes its output. */
  logs: { etcd: string; apiserver: string };
  stop(): Promise<void>;
}

interface ControlPlaneOptions {
  /** Binaries already built; default: built here (cached). */
  binaries?: ControlPlaneBinaries;
  /** The apiserver's port; default a free one. */
  port?: number;
  /** Extra kube-apiserver flags (`--name=value`). */
  apiserverFlags?: readonly string[];
  log?: (line: string) => void;
}

/** setpriv --pdeathsig KILL, where util-linux has it: a process of ours dies with the Node process that started it. */
function withParentDeathSignal(binary: string, args: string[]): [string, string[]] {
  const setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].find((p) => existsSync(p));
  return setpriv ? [setpriv, ["--pdeathsig", "KILL", binary, ...args]] : [binary, args];
}

interface Managed {
  child: ChildProcess;
  exited: Promise<void>;
}

/** Starts `binary` in a process group of its own (setpriv execs it: the group's id is the binary's pid), output appended to `logPath`. */
function startProcess(binary: string, args: string[], logPath: string): Managed {
  const fd = openSync(logPath, "a");
  const [file, argv] = withParentDeathSignal(binary, args);
  const child = spawn(file, argv, { detached: true, stdio: ["ignore", fd, fd] });
  closeSync(fd);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  return { child, exited };
}

async function killGroup(p: Managed | null, signal: NodeJS.Signals): Promise<void> {
  if (!p || p.child.exitCode !== null || p.child.signalCode !== null) return;
  try {
    process.kill(-p.child.pid!, signal);
  } catch {
    // already gone
  }
  await p.exited;
}

function tail(file: string, lines = 30): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no output)";
  }
}

function renderKubeconfig(url: string, caPem: string, user: string, client: KeyPair): string {
  const b64 = (s: string): string => Buffer.from(s).toString("base64");
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "lostwrite", cluster: { server: url, "certificate-authority-data": b64(caPem) } }],
    users: [{ name: user, user: { "client-certificate-data": b64(client.certPem), "client-key-data": b64(client.keyPem) } }],
    contexts: [{ name: user, context: { cluster: "lostwrite", user, namespace: "default" } }],
    "current-context": user,
    preferences: {},
  });
}

export async function startControlPlane(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const log = opts.log ?? (() => {});
  const binaries = opts.binaries ?? (await buildControlPlane(log));
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-controlplane-"));
  let etcd: Managed | null = null;
  let apiserver: Managed | null = null;
  let stopped = false;
  const logs = { etcd: path.join(dir, "etcd.log"), apiserver: path.join(dir, "kube-apiserver.log") };

  const stop = async (): Promise<void> => {
    stopped = true;
    await killGroup(apiserver, "SIGKILL");
    await killGroup(etcd, "SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    const certs = await generateControlPlaneCertificates(path.join(dir, "pki"));
    const admin = await generateClientCertificate(certs, "admin", { user: "lostwrite-admin", groups: ["system:masters"] });
    const port = opts.port ?? (await freeLoopbackPort());
    const url = `https://${HOST}:${port}`;
    const [etcdClientPort, etcdPeerPort] = [await freeLoopbackPort(), await freeLoopbackPort()];
    const etcdUrl = `http://${HOST}:${etcdClientPort}`;
    const etcdPeerUrl = `http://${HOST}:${etcdPeerPort}`;

    const request = (method: string, apiPath: string, r: RequestOptions = {}): Promise<ApiResponse> =>
      new Promise((resolve, reject) => {
        const body = r.body === undefined ? undefined : typeof r.body === "string" ? r.body : JSON.stringify(r.body);
        const client = r.as ?? admin;
        const req = https.request({
          host: HOST, port, path: apiPath, method, ca: certs.caPem, cert: client.certPem, key: client.keyPem, agent: false,
          headers: { accept: "application/json", ...(body !== undefined ? { "content-type": r.contentType ?? "application/json", "content-length": Buffer.byteLength(body) } : {}) },
          timeout: r.timeoutMs ?? 30_000,
        }, (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8");
            let parsed: unknown = text;
            try {
              parsed = JSON.parse(text);
            } catch {
              // not JSON (healthz answers "ok")
            }
            resolve({ status: res.statusCode ?? 0, body: parsed, headers: res.headers });
          });
          res.on("error", reject);
        });
        req.on("timeout", () => req.destroy(new Error(`${method} ${apiPath}: no answer in ${r.timeoutMs ?? 30_000} ms`)));
        req.on("error", reject);
        req.end(body);
      });

    const waitReady = async (what: string, p: () => Managed | null, logPath: string, probe: () => Promise<boolean>): Promise<void> => {
      const deadline = Date.now() + READY_TIMEOUT_MS;
      for (;;) {
        const proc = p();
        if (proc && (proc.child.exitCode !== null || proc.child.signalCode !== null)) throw new Error(`${what} exited before it was ready:\n${tail(logPath)}`);
        if (await probe().catch(() => false)) return;
        if (Date.now() > deadline) throw new Error(`${what} not ready after ${READY_TIMEOUT_MS / 1000} s:\n${tail(logPath)}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    };

    mkdirSync(path.join(dir, "etcd"));
    etcd = startProcess(binaries.etcd, [
      "--name=lostwrite",
      `--data-dir=${path.join(dir, "etcd")}`,
      `--listen-client-urls=${etcdUrl}`,
      `--advertise-client-urls=${etcdUrl}`,
      `--listen-peer-urls=${etcdPeerUrl}`,
      `--initial-advertise-peer-urls=${etcdPeerUrl}`,
      `--initial-cluster=lostwrite=${etcdPeerUrl}`,
      // envtest's: a test's data is thrown away, so nothing is synced to disk.
      "--unsafe-no-fsync=true",
      "--log-level=warn",
    ], logs.etcd);
    await waitReady("etcd", () => etcd, logs.etcd, async () => (await fetch(`${etcdUrl}/health`, { signal: AbortSignal.timeout(1000) })).ok);

    const apiserverArgs = [
      `--etcd-servers=${etcdUrl}`,
      `--cert-dir=${certs.dir}`,
      `--tls-cert-file=${certs.serving.certPath}`,
      `--tls-private-key-file=${certs.serving.keyPath}`,
      `--client-ca-file=${certs.caPath}`,
      `--secure-port=${port}`,
      `--bind-address=${HOST}`,
      `--advertise-address=${HOST}`,
      "--service-cluster-ip-range=10.0.0.0/24",
      `--service-account-issuer=${url}/`,
      `--service-account-key-file=${certs.serviceAccountPublicKeyPath}`,
      `--service-account-signing-key-file=${certs.serviceAccountKeyPath}`,
      "--authorization-mode=Node,RBAC",
      // envtest's: no controller manager creates the default ServiceAccount that admission would require.
      "--disable-admission-plugins=ServiceAccount",
      "--allow-privileged=true",
      // The endpoint reconciler refuses a loopback advertise address ("may not be in the loopback range"); on
      // loopback no Pod reaches the apiserver through the `kubernetes` Service, so that Service gets no endpoints.
      "--endpoint-reconciler-type=none",
      ...(opts.apiserverFlags ?? []),
    ];
    const startApiserver = async (flags: readonly string[] = []): Promise<void> => {
      if (stopped) throw new Error("the control plane was stopped");
      apiserver = startProcess(binaries.kubeApiserver, [...apiserverArgs, ...flags], logs.apiserver);
      await waitReady("kube-apiserver", () => apiserver, logs.apiserver, async () => (await request("GET", "/readyz", { timeoutMs: 2000 })).status === 200);
    };
    const started = Date.now();
    await startApiserver();
    log(`kube-apiserver ready in ${((Date.now() - started) / 1000).toFixed(1)} s`);

    const create = async (collectionPath: string, object: unknown): Promise<unknown> => {
      const res = await request("POST", collectionPath, { body: object });
      if (res.status === 201 || res.status === 200 || res.status === 409) return res.body;
      throw new Error(`POST ${collectionPath}: ${res.status} ${JSON.stringify(res.body)}`);
    };

    await create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", widgetCrd);
    await create("/apis/rbac.authorization.k8s.io/v1/clusterroles", operatorClusterRole);
    await create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", operatorClusterRoleBinding);
    // Established, and served: a list answers.
    await waitReady("the Widget CRD", () => apiserver, logs.apiserver, async () => (await request("GET", `/apis/${WIDGET_GROUP}/${WIDGET_VERSION}/widgets`)).status === 200);

    const adminKubeconfigPath = path.join(dir, "admin.kubeconfig");
    await writeFile(adminKubeconfigPath, renderKubeconfig(url, certs.caPem, "lostwrite-admin", admin), { mode: 0o600 });

    return {
      url, host: HOST, port, dir, caPath: certs.caPath, caPem: certs.caPem, serving: certs.serving, adminKubeconfigPath, admin, logs,
      async kubeconfigFor(name, partial = {}) {
        const identity: Identity = { user: partial.user ?? name, groups: partial.groups ?? [OPERATOR_GROUP] };
        const client = await generateClientCertificate(certs, `client-${name}`, identity);
        const kubeconfigPath = path.join(dir, `${name}.kubeconfig`);
        await writeFile(kubeconfigPath, renderKubeconfig(url, certs.caPem, identity.user, client), { mode: 0o600 });
        return { kubeconfigPath, client, identity };
      },
      request,
      create,
      async ensureNamespace(name) {
        await create("/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name } });
      },
      apiserverPid: () => apiserver?.child.pid ?? 0,
      killApiserver: (signal = "SIGKILL") => killGroup(apiserver, signal),
      startApiserver,
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
