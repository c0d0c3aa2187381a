// Where the apiserver is and how to prove who the agent is: in a pod, the
// ServiceAccount kubelet mounts; outside a cluster, a kubeconfig file.
//
// Read here rather than with @kubernetes/client-node's KubeConfig: that
// module imports the client's whole generated API (every model of every
// group), about 24 MiB of heap and 70 MiB of resident memory on every node,
// for the two resources the agent lists and watches (kubeApi.ts).
//
// What a kubeconfig may say, and what is refused with the key named: the
// current context's cluster (server, certificate-authority[-data],
// insecure-skip-tls-verify, tls-server-name) and user (token, tokenFile,
// client-certificate[-data], client-key[-data]). Credential plugins (`exec`,
// `auth-provider`) and basic auth are refused: the agent runs in the
// cluster, where none of them applies; a kubeconfig for it outside one is a
// test's or a developer's, which can carry a token or a certificate.
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import path from "node:path";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { describeIssues } from "./objects.ts";

/** What requests to the apiserver need. */
export interface ApiAccess {
  /** The server URL, e.g. https://10.96.0.1:443. */
  server: string;
  /** Trusted CA certificates (PEM); without them the system's. */
  ca?: Buffer;
  /** The client certificate and key (PEM). */
  cert?: Buffer;
  key?: Buffer;
  /** The name the server's certificate must have, when not the server URL's host. */
  tlsServerName?: string;
  insecureSkipTlsVerify?: boolean;
  /** A fixed bearer token. */
  token?: string;
  /** A file holding the bearer token, read again for each request: a ServiceAccount's token is rotated. */
  tokenFile?: string;
  /** Where this came from, for messages. */
  source: string;
}

/** Where kubelet mounts a pod's ServiceAccount. */
const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

const ClusterSchema = z.object({
  server: z.url(),
  "certificate-authority": z.string().nullish(),
  "certificate-authority-data": z.string().nullish(),
  "insecure-skip-tls-verify": z.boolean().nullish(),
  "tls-server-name": z.string().nullish(),
});

const UserSchema = z.object({
  token: z.string().nullish(),
  tokenFile: z.string().nullish(),
  "client-certificate": z.string().nullish(),
  "client-certificate-data": z.string().nullish(),
  "client-key": z.string().nullish(),
  "client-key-data": z.string().nullish(),
  // Refused when present (see the top of this file); read only to say so.
  exec: z.unknown().optional(),
  "auth-provider": z.unknown().optional(),
  username: z.unknown().optional(),
  password: z.unknown().optional(),
});
type User = z.infer<typeof UserSchema>;

const KubeconfigSchema = z.object({
  "current-context": z.string().nullish(),
  clusters: z.array(z.object({ name: z.string().min(1), cluster: ClusterSchema })).nullish(),
  users: z.array(z.object({ name: z.string().min(1), user: UserSchema.nullish() })).nullish(),
  contexts: z.array(z.object({ name: z.string().min(1), context: z.object({ cluster: z.string().min(1), user: z.string().nullish() }) })).nullish(),
});
type Kubeconfig = z.infer<typeof KubeconfigSchema>;

/**
 * The kubeconfig file given, else the first of $KUBECONFIG's files and
 * ~/.kube/config that exists, else the pod's ServiceAccount. Throws an error
 * naming the file and key when none applies or one is invalid.
 */
export function loadApiAccess(kubeconfig?: string, env: NodeJS.ProcessEnv = process.env): ApiAccess {
  if (kubeconfig !== undefined && kubeconfig !== "") return fromKubeconfigFile(kubeconfig);
  const candidates = [...(env.KUBECONFIG ?? "").split(path.delimiter).filter((p) => p !== ""), path.join(homedir(), ".kube", "config")];
  const file = candidates.find((p) => existsSync(p));
  if (file !== undefined) return fromKubeconfigFile(file);
  return fromServiceAccount(env);
}

/** The pod's ServiceAccount and the Service address kubelet puts in every container's environment. */
export function fromServiceAccount(env: NodeJS.ProcessEnv, dir = SERVICE_ACCOUNT_DIR): ApiAccess {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT ?? "443";
  if (host === undefined || host === "") {
    throw new Error("no kubeconfig found ($KUBECONFIG, ~/.kube/config) and not in a pod (KUBERNETES_SERVICE_HOST is not set): pass --kubeconfig");
  }
  if (!/^\d{1,5}$/.test(port)) throw new Error(`KUBERNETES_SERVICE_PORT ${JSON.stringify(port)} is not a port`);
  const tokenFile = path.join(dir, "token");
  if (!existsSync(tokenFile)) throw new Error(`in a pod, but ${tokenFile} is missing: is automountServiceAccountToken off?`);
  const caFile = path.join(dir, "ca.crt");
  return {
    server: `https://${host.includes(":") ? `[${host}]` : host}:${port}`,
    ...(existsSync(caFile) ? { ca: readFileSync(caFile) } : {}),
    tokenFile,
    source: `ServiceAccount ${dir}`,
  };
}

function fromKubeconfigFile(file: string): ApiAccess {
  let raw: unknown;
  try {
    raw = parseYaml(readFileSync(file, "utf8"));
  } catch (err) {
    throw new Error(`kubeconfig ${file}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const parsed = KubeconfigSchema.safeParse(raw);
  if (!parsed.success) throw new Error(`kubeconfig ${file}: ${describeIssues(parsed.error)}`);
  return accessFromKubeconfig(parsed.data, file);
}

/** The current context's cluster and user, files resolved against the kubeconfig's directory. */
function accessFromKubeconfig(config: Kubeconfig, file: string): ApiAccess {
  const where = (key: string): string => `kubeconfig ${file}: ${key}`;
  const contextName = config["current-context"];
  const contexts = config.contexts ?? [];
  const context = contextName ? contexts.find((c) => c.name === contextName) : contexts.length === 1 ? contexts[0] : undefined;
  if (context === undefined) throw new Error(where(`current-context ${JSON.stringify(contextName ?? "")} names no context`));
  const { cluster: clusterName, user: userName } = context.context;
  const cluster = (config.clusters ?? []).find((c) => c.name === clusterName)?.cluster;
  if (cluster === undefined) throw new Error(where(`contexts[${context.name}].context.cluster ${JSON.stringify(clusterName)} names no cluster`));
  const user = userName ? (config.users ?? []).find((u) => u.name === userName) : undefined;
  if (userName && user === undefined) throw new Error(where(`contexts[${context.name}].context.user ${JSON.stringify(userName)} names no user`));
  const u: User = user?.user ?? {};
  for (const refused of ["exec", "auth-provider", "username", "password"] as const) {
    if (u[refused] !== undefined && u[refused] !== null) {
      throw new Error(where(`users[${userName}].user.${refused}: not supported; give the agent a token, tokenFile or client certificate`));
    }
  }
  const dir = path.dirname(path.resolve(file));
  const fileOrData = (fileKey: string, filePath: string | null | undefined, data: string | null | undefined): Buffer | undefined => {
    if (data) return Buffer.from(data, "base64");
    if (!filePath) return undefined;
    const resolved = path.resolve(dir, filePath);
    try {
      return readFileSync(resolved);
    } catch (err) {
      throw new Error(where(`${fileKey} ${JSON.stringify(resolved)}: ${err instanceof Error ? err.message : String(err)}`), { cause: err });
    }
  };
  const ca = fileOrData(`clusters[${clusterName}].cluster.certificate-authority`, cluster["certificate-authority"], cluster["certificate-authority-data"]);
  const cert = fileOrData(`users[${userName}].user.client-certificate`, u["client-certificate"], u["client-certificate-data"]);
  const key = fileOrData(`users[${userName}].user.client-key`, u["client-key"], u["client-key-data"]);
  if ((cert === undefined) !== (key === undefined)) {
    throw new Error(where(`users[${userName}].user: a client certificate needs its key, and a key its certificate`));
  }
  return {
    server: cluster.server.replace(/\/+$/, ""),
    ...(ca ? { ca } : {}),
    ...(cert && key ? { cert, key } : {}),
    ...(cluster["tls-server-name"] ? { tlsServerName: cluster["tls-server-name"] } : {}),
    ...(cluster["insecure-skip-tls-verify"] ? { insecureSkipTlsVerify: true } : {}),
    ...(u.token ? { token: u.token } : {}),
    ...(u.tokenFile ? { tokenFile: path.resolve(dir, u.tokenFile) } : {}),
    source: `kubeconfig ${file}`,
  };
}
