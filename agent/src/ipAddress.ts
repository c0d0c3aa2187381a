// One text per IP address, so an address read from a socket and the same
// address read from a Kubernetes object compare equal: an IPv4 peer of a
// dual-stack listener shows as "::ffff:10.0.0.5", and IPv6 has many spellings.
import ipaddr from "ipaddr.js";

/** The canonical text of an IP address ("::ffff:a.b.c.d" as "a.b.c.d"); null when it is not one. */
export function canonicalAddress(text: string): string | null {
  if (!ipaddr.isValid(text)) return null;
  return ipaddr.process(text).toNormalizedString();
}

/** 127.0.0.0/8 or ::1 (an IPv4-mapped loopback too). */
export function isLoopbackAddress(text: string): boolean {
  return ipaddr.isValid(text) && ipaddr.process(text).range() === "loopback";
}

/**
 * An IPv6 address's 16 bytes as the kernel's inet_ntop writes them (as
 * bpftrace's ntop prints an address): RFC 5952's shortest form, and the
 * last 4 bytes dotted after "::ffff:" (IPv4-mapped) or "::" (IPv4-compatible).
 */
export function ipv6Text(bytes: Uint8Array): string {
  if (bytes.length !== 16) throw new RangeError(`an IPv6 address is 16 bytes, got ${bytes.length}`);
  const word = (i: number): number => (bytes[2 * i]! << 8) | bytes[2 * i + 1]!;
  const dotted = [...bytes.subarray(12)].join(".");
  const zeroUpTo = (n: number): boolean => bytes.subarray(0, 2 * n).every((b) => b === 0);
  if (zeroUpTo(5) && word(5) === 0xffff) return `::ffff:${dotted}`;
  if (zeroUpTo(6) && (word(6) !== 0 || word(7) > 1)) return `::${dotted}`;
  return (ipaddr.fromByteArray([...bytes]) as ipaddr.IPv6).toRFC5952String();
}
