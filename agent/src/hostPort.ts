// "host:port" and "[IPv6]:port", read and written in one place: flags,
// listen addresses, apiserver endpoints, span attributes, event fields.
export interface HostPort {
  /** Without brackets: "10.0.0.1", "fd00::1", "localhost". */
  host: string;
  port: number;
}

const HOST_PORT = /^(?:\[([^\]\s]+)\]|([^:[\]\s]+)):(\d{1,5})$/;

/** The host and port of "host:port" or "[v6]:port" (port 0..65535); null for anything else. */
export function splitHostPort(value: string): HostPort | null {
  const parsed = readHostPort(value);
  return typeof parsed === "string" ? null : parsed;
}

/** As splitHostPort, throwing an error that names what was expected and the value. */
export function parseHostPort(value: string, what = "address"): HostPort {
  const parsed = readHostPort(value);
  if (typeof parsed === "string") throw new Error(`${what}: ${parsed}`);
  return parsed;
}

/** The host and port, or what is wrong with the value, in words that name it. */
export function readHostPort(value: string): HostPort | string {
  const m = HOST_PORT.exec(value);
  if (m === null) return `"${value}" is not HOST:PORT or [IPv6]:PORT`;
  const port = Number(m[3]);
  if (port > 65535) return `port "${m[3]}" of "${value}" is not 0..65535`;
  return { host: m[1] ?? m[2]!, port };
}

/** A host as it goes before ":port" or into a URL: an IPv6 address in brackets. */
export function bracketHost(host: string): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}

/** The host without the brackets an IPv6 literal has in "[v6]:port" and URLs. */
export function unbracketHost(host: string): string {
  return host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
}

export function formatHostPort(host: string, port: number): string {
  return `${bracketHost(host)}:${port}`;
}
