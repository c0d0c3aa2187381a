// A stand-in apiserver at the TCP level for tests that need a connection to
// die in a chosen way: it reads requests and acts on a word in them. RESET:
// reset the connection (what an apiserver restarting under a request looks
// like); CLOSE: close it (FIN) without an answer. Anything else is read and
// left unanswered.
import net from "node:net";

export async function faultyApiserver(host = "127.0.0.1"): Promise<net.Server> {
  const server = net.createServer((socket) => {
    socket.on("error", () => undefined);
    socket.on("data", (data) => {
      if (data.includes("RESET")) socket.resetAndDestroy();
      else if (data.includes("CLOSE")) socket.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return server;
}

export function portOf(server: net.Server): number {
  return (server.address() as net.AddressInfo).port;
}
