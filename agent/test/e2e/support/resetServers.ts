// Servers that stand in for an apiserver which kills the connection: the
// faults the socket path must catch, on loopback, at a port the kernel picks.
import net from "node:net";
import tls from "node:tls";
import { generateCertificates } from "../../../../testbed/apiserver/certificates.ts";

/** A plain TCP server that resets a connection as soon as it reads "RESET". */
export async function resetOnMarkerServer(): Promise<net.Server> {
  const server = net.createServer((socket) => {
    socket.on("data", (data) => {
      if (data.includes("RESET")) socket.resetAndDestroy();
    });
    socket.on("error", () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return server;
}

/** A TLS server standing in for the apiserver: reads the request, then resets the TCP connection. */
export async function tlsResetServer(dir: string): Promise<net.Server> {
  const certs = await generateCertificates(dir);
  const context = tls.createSecureContext({ cert: certs.certPem, key: certs.keyPem });
  const server = net.createServer((raw) => {
    raw.on("error", () => undefined);
    const secure = new tls.TLSSocket(raw, { isServer: true, secureContext: context });
    secure.on("error", () => undefined);
    secure.on("data", () => raw.resetAndDestroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return server;
}
