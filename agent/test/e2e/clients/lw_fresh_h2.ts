// Node's HTTP/2 client (nghttp2, the shape of a non-Go HTTP/2 client such as
// fabric8's) for the fresh-connection e2e test: waits for a line on stdin
// (the agent watches it by then), opens a new TLS connection, negotiates h2
// and sends a status PATCH as its first stream, at once: the connection
// preface, SETTINGS, HEADERS and DATA cross the server's own SETTINGS on the
// wire. Reports one JSON line: what it read, or the error, and the TLS version.
//
// Usage: node lw_fresh_h2.ts PORT TLS_VERSION ACTION   (ACTION: reset | close, the path says it)
import http2 from "node:http2";
import type tls from "node:tls";

const [port = "", version = "", action = ""] = process.argv.slice(2);
const body = `{"status":{"phase":"Ready","message":"${"x".repeat(300)}"}}`;

process.stdin.once("data", () => {
  process.stdin.pause();
  const tlsVersion = `TLSv${version}` as tls.SecureVersion;
  let protocol: string | null = null;
  let read = 0;
  let error: string | null = null;
  const session = http2.connect(`https://127.0.0.1:${port}`, { rejectUnauthorized: false, minVersion: tlsVersion, maxVersion: tlsVersion });
  session.on("connect", (_session, socket) => (protocol = (socket as tls.TLSSocket).getProtocol()));
  session.on("error", (err: NodeJS.ErrnoException) => (error ??= err.code ?? String(err)));
  const stream = session.request({
    ":method": "PATCH",
    ":path": `/apis/demo.lostwrite.dev/v1/namespaces/${action}/widgets/w1/status`,
    "content-type": "application/merge-patch+json",
  });
  stream.on("data", (chunk: Buffer) => (read += chunk.length));
  stream.on("error", (err: NodeJS.ErrnoException) => (error ??= err.code ?? String(err)));
  stream.on("close", () => session.close());
  stream.end(body);
  session.on("close", () => console.log(JSON.stringify({ step: "fresh_h2", tls: protocol, alpn: session.alpnProtocol ?? null, read, error })));
});
