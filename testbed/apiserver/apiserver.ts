// Starts the testbed apiserver: certificates, kubeconfig, the TLS listener
// with HTTP/2 and HTTP/1.1, the fault rules and the control API.
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import path from "node:path";
import tls from "node:tls";
import { generateCertificates } from "./certificates.ts";
import { Listener } from "./connections.ts";
import { createControlServer } from "./control.ts";
import { FaultControl, type FaultRecord } from "./faults.ts";
import { createRequestHandler } from "./httpHandler.ts";
import { writeKubeconfig } from "./kubeconfig.ts";
import { loadScenario, type Scenario } from "./scenario.ts";
import { ObjectStore, type StoreOptions } from "./store.ts";

export interface ApiserverOptions {
  /** Loopback address to listen on (default 127.0.0.1; "::1" works too). */
  host?: string;
  /** 0 (default) picks a free port. */
  port?: number;
  /** Where certificates, the kubeconfig and faults.jsonl go. */
  dir: string;
  /** Control API address (default 127.0.0.1, port 0). */
  controlHost?: string;
  controlPort?: number;
  /** A parsed scenario or the path of a YAML scenario file; its rules are armed at start. */
  scenario?: Scenario | string;
  /** JSON lines fault log (default `${dir}/faults.jsonl`). */
  faultLogPath?: string;
  store?: StoreOptions;
}

export interface Apiserver {
  /** https://127.0.0.1:PORT (IPv6 hosts in brackets). */
  url: string;
  host: string;
  port: number;
  kubeconfigPath: string;
  caPath: string;
  /** http://127.0.0.1:PORT of the control API. */
  controlUrl: string;
  control: FaultControl;
  faultLog(): FaultRecord[];
  /** The requests received, "METHOD path?query", oldest first (the latest 10 000). */
  requestsSeen(): readonly string[];
  store: ObjectStore;
  close(): Promise<void>;
}

function urlHost(host: string): string {
  return host.includes(":") ? `[${host}]` : host;
}

export async function startApiserver(opts: ApiserverOptions): Promise<Apiserver> {
  const host = opts.host ?? "127.0.0.1";
  const certs = await generateCertificates(opts.dir);
  const store = new ObjectStore(opts.store);
  const faults = new FaultControl({ logPath: opts.faultLogPath ?? path.join(opts.dir, "faults.jsonl") });

  const httpServer = http2.createSecureServer({ key: certs.keyPem, cert: certs.certPem, allowHTTP1: true });
  // A real apiserver keeps idle HTTP/1.1 connections far longer than node's 5 s default;
  // clients that reuse connections should be able to.
  (httpServer as unknown as { keepAliveTimeout: number }).keepAliveTimeout = 10 * 60_000;
  const requests: string[] = [];
  httpServer.on("request", (req: http2.Http2ServerRequest) => {
    if (requests.length >= 10_000) requests.shift();
    requests.push(`${req.method} ${req.url}`);
  });
  httpServer.on("request", createRequestHandler({ store, faults }));
  httpServer.on("sessionError", () => undefined);

  const listener = new Listener({
    host, port: opts.port ?? 0,
    secureContext: tls.createSecureContext({ key: certs.keyPem, cert: certs.certPem }),
    // What node:tls would do after a handshake: the HTTP/2 server picks h2 or HTTP/1.1 by ALPN.
    onSecureConnection: (socket) => httpServer.emit("secureConnection", socket),
  });
  await listener.listen();
  faults.attach(listener);

  const url = `https://${urlHost(host)}:${listener.port}`;
  const kubeconfigPath = path.join(opts.dir, "kubeconfig");
  await writeKubeconfig(kubeconfigPath, { url, caPem: certs.caPem });

  const controlServer = createControlServer({ faults, store, listener });
  await new Promise<void>((resolve, reject) => {
    controlServer.once("error", reject);
    controlServer.listen(opts.controlPort ?? 0, opts.controlHost ?? "127.0.0.1", () => resolve());
  });
  const controlAddress = controlServer.address() as AddressInfo;

  if (opts.scenario !== undefined) {
    faults.loadScenario(typeof opts.scenario === "string" ? await loadScenario(opts.scenario) : opts.scenario);
  }

  let closed: Promise<void> | undefined;
  return {
    url, host, port: listener.port, kubeconfigPath, caPath: certs.caPath,
    controlUrl: `http://${urlHost(controlAddress.address)}:${controlAddress.port}`,
    control: faults, faultLog: () => faults.faults(), requestsSeen: () => requests, store,
    close: () => {
      closed ??= (async () => {
        controlServer.closeAllConnections();
        await Promise.all([
          listener.close(),
          new Promise<void>((resolve) => controlServer.close(() => resolve())),
        ]);
        await faults.close();
      })();
      return closed;
    },
  };
}
