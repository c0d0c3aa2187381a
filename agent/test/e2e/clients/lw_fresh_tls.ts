// Node's TLS client for the fresh-connection e2e test: waits for a line on
// stdin (the agent watches it by then), opens a new TLS connection and writes
// a status PATCH as soon as the handshake is done (Node puts its Finished and
// the request in one send), then reports one JSON line: what it read, or the
// error, and the TLS version.
//
// Usage: node lw_fresh_tls.ts PORT TLS_VERSION ACTION   (ACTION: reset | close, the path says it)
import tls from "node:tls";

const [port = "", version = "", action = ""] = process.argv.slice(2);
const body = `{"status":{"phase":"Ready","message":"${"x".repeat(300)}"}}`;
const request =
  `PATCH /apis/demo.lostwrite.dev/v1/namespaces/${action}/widgets/w1/status HTTP/1.1\r\nHost: localhost\r\n` +
  `Content-Type: application/merge-patch+json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;

process.stdin.once("data", () => {
  process.stdin.pause();
  const tlsVersion = `TLSv${version}` as tls.SecureVersion;
  let protocol: string | null = null;
  const socket = tls.connect({ host: "127.0.0.1", port: Number(port), rejectUnauthorized: false, minVersion: tlsVersion, maxVersion: tlsVersion }, () => {
    protocol = socket.getProtocol();
    socket.write(request);
  });
  let read = 0;
  let error: string | null = null;
  socket.on("data", (chunk: Buffer) => (read += chunk.length));
  socket.on("error", (err: NodeJS.ErrnoException) => (error = err.code ?? String(err)));
  socket.on("close", () => {
    console.log(JSON.stringify({ step: "fresh_tls", tls: protocol, read, error }));
  });
});
