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
