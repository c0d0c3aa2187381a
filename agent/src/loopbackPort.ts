// A free port on 127.0.0.1, for the demo's endpoints (and the tests' and the
// benchmark's): the kernel picks it, we release it and hand it on.
import net from "node:net";

/** A port on 127.0.0.1 that was free a moment ago. */
export async function freeLoopbackPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
