// Every address a process can see as the apiserver's peer address:
//  - the `kubernetes` Service ClusterIP (KUBERNETES_SERVICE_HOST/PORT), which
//    is what a socket shows behind kube-proxy's DNAT;
//  - every address of the `default/kubernetes` EndpointSlices, which is what
//    a socket shows when the CNI rewrites the ClusterIP at connect time
//    (kube-proxy-less clusters: Cilium, Calico eBPF);
//  - the kubeconfig host, out of cluster.
import type { EndpointSlice } from "./objects.ts";
import { unbracketHost } from "../../../hostPort.ts";

export interface ApiserverEndpoint {
  host: string;
  port: number;
}

function validPort(port: number): boolean {
  return Number.isInteger(port) && port >= 1 && port <= 65535;
}

/** The Service endpoint from the variables kubelet sets in every container; null when absent. */
export function endpointFromEnv(env: NodeJS.ProcessEnv): ApiserverEndpoint | null {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = Number(env.KUBERNETES_SERVICE_PORT ?? "443");
  if (!host || !validPort(port)) return null;
  return { host: unbracketHost(host), port };
}

/** The host and port of a kubeconfig server URL ("https://10.0.0.1:6443"). */
export function endpointFromServerUrl(server: string): ApiserverEndpoint | null {
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    return null;
  }
  const port = url.port === "" ? (url.protocol === "http:" ? 80 : 443) : Number(url.port);
  if (url.hostname === "" || !validPort(port)) return null;
  return { host: unbracketHost(url.hostname), port };
}

/** Every IP address × port of the slices; FQDN slices do not name a socket peer and are skipped. */
export function endpointsFromSlices(slices: Iterable<EndpointSlice>): ApiserverEndpoint[] {
  const out: ApiserverEndpoint[] = [];
  for (const slice of slices) {
    if (slice.addressType !== "IPv4" && slice.addressType !== "IPv6") continue;
    const ports = (slice.ports ?? []).map((p) => p.port).filter((p): p is number => typeof p === "number");
    // Terminating and not-ready apiservers are kept: a write lost while one
    // shuts down is exactly what must be seen.
    for (const endpoint of slice.endpoints ?? []) {
      for (const address of endpoint.addresses) {
        for (const port of ports) out.push({ host: address, port });
      }
    }
  }
  return out;
}

/** Deduplicated and sorted, so that two equal sets compare equal. */
export function normaliseEndpoints(endpoints: Iterable<ApiserverEndpoint>): ApiserverEndpoint[] {
  const byKey = new Map<string, ApiserverEndpoint>();
  for (const e of endpoints) byKey.set(`${e.host}|${e.port}`, e);
  return [...byKey.values()].sort((a, b) => (a.host === b.host ? a.port - b.port : a.host < b.host ? -1 : 1));
}

export function sameEndpoints(a: readonly ApiserverEndpoint[], b: readonly ApiserverEndpoint[]): boolean {
  return a.length === b.length && a.every((e, i) => e.host === b[i]?.host && e.port === b[i]?.port);
}
