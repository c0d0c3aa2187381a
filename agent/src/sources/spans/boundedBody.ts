// Reads an HTTP message body (a request the agent receives, an answer it
// gets) with a byte limit on the wire and, for gzip, a second limit on the
// decompressed bytes, enforced while inflating: a gzip bomb is
// stopped at the limit instead of being inflated into memory first.
import type { IncomingMessage } from "node:http";
import { createGunzip } from "node:zlib";

type BodyResult =
  | { ok: true; raw: Buffer; decoded: Buffer }
  | { ok: false; reason: "too_large" | "malformed"; detail: string };

/**
 * `raw` is the body as sent (for forwarding unchanged), `decoded` the bytes
 * after Content-Encoding. Both are at most `maxBytes` long.
 */
export function readBoundedBody(req: IncomingMessage, maxBytes: number, gzip: boolean): Promise<BodyResult> {
  return new Promise((resolve) => {
    const raw: Buffer[] = [];
    const decoded: Buffer[] = [];
    let rawBytes = 0;
    let decodedBytes = 0;
    let settled = false;
    const gunzip = gzip ? createGunzip() : null;

    const finish = (result: BodyResult): void => {
      if (settled) return;
      settled = true;
      req.off("data", onData);
      if (gunzip !== null) {
        gunzip.removeAllListeners("data");
        gunzip.destroy();
      }
      // Stop reading an oversized or broken body; the response still goes out.
      if (!result.ok) req.resume();
      resolve(result);
    };
    const onDecoded = (chunk: Buffer): void => {
      decodedBytes += chunk.length;
      if (decodedBytes > maxBytes) {
        finish({ ok: false, reason: "too_large", detail: `decompressed body exceeds ${maxBytes} bytes` });
        return;
      }
      decoded.push(chunk);
    };
    const onData = (chunk: Buffer): void => {
      rawBytes += chunk.length;
      if (rawBytes > maxBytes) {
        finish({ ok: false, reason: "too_large", detail: `body exceeds ${maxBytes} bytes` });
        return;
      }
      raw.push(chunk);
      if (gunzip !== null) gunzip.write(chunk);
    };

    req.on("data", onData);
    req.on("error", (err) => finish({ ok: false, reason: "malformed", detail: `request stream: ${err.message}` }));
    req.on("aborted", () => finish({ ok: false, reason: "malformed", detail: "request aborted" }));
    if (gunzip === null) {
      req.on("end", () => {
        const body = Buffer.concat(raw);
        finish({ ok: true, raw: body, decoded: body });
      });
      return;
    }
    gunzip.on("data", onDecoded);
    gunzip.on("error", (err) => finish({ ok: false, reason: "malformed", detail: `gzip: ${err.message}` }));
    gunzip.on("end", () => finish({ ok: true, raw: Buffer.concat(raw), decoded: Buffer.concat(decoded) }));
    req.on("end", () => {
      if (!settled) gunzip.end();
    });
  });
}
