// Wires the operator: an informer (list + watch through @kubernetes/client-node)
// feeds keys into the work queue; N workers take keys and reconcile the cached
// object. The informer's watch runs on its own connection (client-node's
// undici pool, kept alive between list and watch calls); reconcile requests go
// through ApiClient's single shared HTTP/2 connection.
import { CustomObjectsApi, KubeConfig, makeInformer, type KubernetesListObject } from "@kubernetes/client-node";
import type https from "node:https";
import type { Tracer } from "@opentelemetry/api";
import { ApiClient } from "./apiClient.ts";
import { GROUP, PLURAL, Reconciler, VERSION, type Logger, type Mode, type Widget } from "./reconciler.ts";
import { WorkQueue } from "./workQueue.ts";

interface OperatorOptions {
  kubeconfigPath: string;
  mode: Mode;
  workers: number;
  tracer: Tracer;
  log: Logger;
  /** Only this namespace (default: all). */
  namespace?: string;
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** 429s with a retry-after waited out and sent again within the reconcile (client-go does this). */
  throttleRetries?: number;
}

interface Operator {
  client: ApiClient;
  queue: WorkQueue;
  stop(): Promise<void>;
}

function keyOf(widget: Widget): string {
  return `${widget.metadata?.namespace ?? "default"}/${widget.metadata?.name ?? ""}`;
}

export async function startOperator(opts: OperatorOptions): Promise<Operator> {
  const kc = new KubeConfig();
  kc.loadFromFile(opts.kubeconfigPath);
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error(`kubeconfig ${opts.kubeconfigPath}: no current cluster`);
  // ca, client certificate and Authorization header, as the kubeconfig says.
  const tlsOptions: https.RequestOptions = {};
  await kc.applyToHTTPSOptions(tlsOptions);
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(tlsOptions.headers ?? {})) if (typeof value === "string") headers[name.toLowerCase()] = value;

  const client = new ApiClient({
    server: cluster.server, ca: tlsOptions.ca as string | Buffer | undefined, cert: tlsOptions.cert as string | Buffer | undefined,
    key: tlsOptions.key as string | Buffer | undefined, headers, tracer: opts.tracer, throttleRetries: opts.throttleRetries ?? 0,
  });
  const reconciler = new Reconciler({ client, tracer: opts.tracer, mode: opts.mode, log: opts.log });
  const queue = new WorkQueue({ baseDelayMs: opts.baseDelayMs, maxDelayMs: opts.maxDelayMs });

  const api = kc.makeApiClient(CustomObjectsApi);
  const path = opts.namespace === undefined ? `/apis/${GROUP}/${VERSION}/${PLURAL}` : `/apis/${GROUP}/${VERSION}/namespaces/${opts.namespace}/${PLURAL}`;
  const list = (): Promise<KubernetesListObject<Widget>> => (opts.namespace === undefined
    ? api.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL })
    : api.listNamespacedCustomObject({ group: GROUP, version: VERSION, plural: PLURAL, namespace: opts.namespace })) as Promise<KubernetesListObject<Widget>>;
  const informer = makeInformer<Widget>(kc, path, list);
  informer.on("add", (widget) => queue.add(keyOf(widget)));
  informer.on("update", (widget) => queue.add(keyOf(widget)));
  informer.on("delete", (widget) => queue.forget(keyOf(widget)));
  let stopping = false;
  // Not unref'd: while the apiserver is down this timer may be all that keeps
  // the process alive (an operator with nothing queued), and Node would exit
  // quietly, code 0, in the middle of the outage.
  let restart: NodeJS.Timeout | undefined;
  informer.on("error", (error: unknown) => {
    if (stopping) return;
    opts.log({ level: "error", msg: "watch failed, restarting", error: String(error) });
    clearTimeout(restart);
    restart = setTimeout(() => { if (!stopping) informer.start().catch(() => undefined); }, 1000);
  });

  const worker = async (): Promise<void> => {
    for (;;) {
      const key = await queue.get();
      if (key === undefined) return;
      const [namespace = "", name = ""] = key.split("/");
      try {
        const widget = informer.get(name, namespace);
        if (widget) await reconciler.reconcile(widget);
        queue.forget(key);
      } catch {
        queue.addRateLimited(key);
      } finally {
        queue.done(key);
      }
    }
  };
  const workers = Array.from({ length: opts.workers }, () => worker());
  await informer.start();

  return {
    client, queue,
    stop: async () => {
      stopping = true;
      clearTimeout(restart);
      queue.shutdown();
      await informer.stop();
      await Promise.all(workers);
      client.close();
    },
  };
}
