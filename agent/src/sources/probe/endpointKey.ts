// Apiserver endpoints as the probe's kernel maps key them: the address exactly
// as `struct sock` stores it (network byte order, loaded as little-endian
// words on x86_64/arm64) and the port in host order.
import net from "node:net";
import ipaddr from "ipaddr.js";
import { formatHostPort, readHostPort, splitHostPort } from "../../hostPort.ts";

export type EndpointKey =
  | { family: 4; addr: bigint; port: number; text: string }
  | { family: 6; hi: bigint; lo: bigint; port: number; text: string };


/** Parses "host:port" or "[v6]:port"; the host must be an IP literal. */
export function parseEndpoint(value: string): EndpointKey {
  const parsed = readHostPort(value);
  if (typeof parsed === "string") throw new Error(`apiserver endpoint ${parsed}`);
  if (parsed.port < 1) throw new Error(`apiserver endpoint "${value}": port ${parsed.port} is not 1..65535`);
  return endpointKey(parsed.host, parsed.port);
}

export function endpointKey(host: string, portNumber: number): EndpointKey {
  const family = net.isIP(host);
  if (family === 4) {
    const bytes = Buffer.from(host.split(".").map(Number));
    return { family: 4, addr: BigInt(bytes.readUInt32LE(0)), port: portNumber, text: formatHostPort(host, portNumber) };
  }
  if (family === 6) {
    const bytes = ipv6Bytes(host);
    const hi = (BigInt(bytes.readUInt32LE(0)) << 32n) | BigInt(bytes.readUInt32LE(4));
    const lo = (BigInt(bytes.readUInt32LE(8)) << 32n) | BigInt(bytes.readUInt32LE(12));
    return { family: 6, hi, lo, port: portNumber, text: formatHostPort(host, portNumber) };
  }
  throw new Error(`apiserver endpoint host "${host}" is not an IP address`);
}

/**
 * An IPv4 endpoint is also reachable from an IPv6 socket as ::ffff:a.b.c.d
 * (dual-stack runtimes such as the JVM): both keys go into the kernel.
 */
export function kernelKeys(key: EndpointKey): EndpointKey[] {
  if (key.family === 6) return [key];
  const mapped = endpointKey(`::ffff:${splitHostPort(key.text)!.host}`, key.port);
  return [key, mapped];
}

function ipv6Bytes(host: string): Buffer {
  return Buffer.from(ipaddr.IPv6.parse(host).toByteArray());
}
