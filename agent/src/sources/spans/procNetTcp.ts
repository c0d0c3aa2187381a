// The kernel's table of TCP sockets of one network namespace, as
// /proc/<pid>/net/tcp and tcp6 print it, and the one question the span intake
// asks of it: which socket is the client end of an OTLP connection the agent
// accepted. Its inode then names the process holding it (socketOwner.ts).
//
//   sl  local_address                         rem_address                           st ... uid timeout inode
//    0: 0100007F:A2C4                         0100007F:10DE                         01 ...   0       0 48213 ...
//    0: 0000000000000000FFFF00000100007F:A2C4 0000000000000000FFFF00000100007F:10DE 01 ...
//
// An address is the kernel's in-memory word(s) printed as hex: IPv4 one
// 32-bit word, IPv6 four, each in the host's byte order (so 127.0.0.1 reads
// 0100007F on little-endian machines). The port is printed as a number.
import os from "node:os";
import { canonicalAddress } from "../../ipAddress.ts";

export interface Endpoint {
  /** canonicalAddress form: an IPv4-mapped IPv6 address reads as IPv4. */
  address: string;
  port: number;
}

interface TcpSocketRow {
  local: Endpoint;
  remote: Endpoint;
  /** TCP state number (1 = ESTABLISHED). */
  state: number;
  /** 0 for sockets no file holds (TIME_WAIT, a connection not accepted yet). */
  inode: number;
}

const LITTLE_ENDIAN = os.endianness() === "LE";

/** The address of one hex field ("0100007F", 32 hex digits for IPv6); null when malformed. */
export function decodeHexAddress(hex: string, littleEndian = LITTLE_ENDIAN): string | null {
  if (!/^(?:[0-9A-Fa-f]{8}){1,4}$/.test(hex) || (hex.length !== 8 && hex.length !== 32)) return null;
  const bytes: number[] = [];
  for (let word = 0; word < hex.length; word += 8) {
    const wordBytes = [0, 2, 4, 6].map((i) => parseInt(hex.slice(word + i, word + i + 2), 16));
    bytes.push(...(littleEndian ? wordBytes.reverse() : wordBytes));
  }
  if (bytes.length === 4) return bytes.join(".");
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16));
  return canonicalAddress(groups.join(":"));
}

function decodeEndpoint(field: string, littleEndian: boolean): Endpoint | null {
  const [hex, portHex, extra] = field.split(":");
  if (hex === undefined || portHex === undefined || extra !== undefined || !/^[0-9A-Fa-f]{4}$/.test(portHex)) return null;
  const address = decodeHexAddress(hex, littleEndian);
  return address === null ? null : { address, port: parseInt(portHex, 16) };
}

/** The rows of a /proc/net/tcp or tcp6 text; the header and malformed rows are skipped. */
export function parseProcNetTcp(text: string, littleEndian = LITTLE_ENDIAN): TcpSocketRow[] {
  const rows: TcpSocketRow[] = [];
  for (const line of text.split("\n")) {
    const fields = line.trim().split(/\s+/);
    // sl local rem st tx:rx tr:when retrnsmt uid timeout inode …
    if (fields.length < 10 || !/^\d+:$/.test(fields[0]!)) continue;
    const local = decodeEndpoint(fields[1]!, littleEndian);
    const remote = decodeEndpoint(fields[2]!, littleEndian);
    const state = parseInt(fields[3]!, 16);
    const inode = Number(fields[9]);
    if (local === null || remote === null || !Number.isInteger(state) || !Number.isSafeInteger(inode)) continue;
    rows.push({ local, remote, state, inode });
  }
  return rows;
}

/** An accepted connection as the agent's socket shows it: the client's end and the agent's. */
export interface AcceptedConnection {
  client: Endpoint;
  server: Endpoint;
}

/**
 * The inode of the client end of `connection` among `rows`; null when no
 * row, or more than one socket, fits.
 *
 * In the agent's own network namespace (`sameNamespace`) the row is the exact
 * mirror of the agent's socket. In another namespace the client may have
 * dialled another address (a Service's ClusterIP, the node's hostPort) that
 * was translated to the agent's: its own address and port must match, and the
 * port it dialled is the agent's when one row says so; otherwise the one
 * socket at that address and port. Linux lets one local port carry
 * connections to several remotes, so a second socket there makes it
 * ambiguous, never a guess.
 */
export function findClientSocket(rows: readonly TcpSocketRow[], connection: AcceptedConnection, sameNamespace: boolean): number | null {
  const client = canonicalEndpoint(connection.client);
  const server = canonicalEndpoint(connection.server);
  if (client === null || server === null) return null;
  const atClient = rows.filter((r) => r.inode !== 0 && sameEndpoint(r.local, client));
  const exact = atClient.filter((r) => r.remote.port === server.port && (!sameNamespace || r.remote.address === server.address));
  const fitting = exact.length > 0 || sameNamespace ? exact : atClient;
  const inodes = new Set(fitting.map((r) => r.inode));
  return inodes.size === 1 ? [...inodes][0]! : null;
}

function canonicalEndpoint(endpoint: Endpoint): Endpoint | null {
  const address = canonicalAddress(endpoint.address);
  return address === null ? null : { address, port: endpoint.port };
}

function sameEndpoint(a: Endpoint, b: Endpoint): boolean {
  return a.port === b.port && a.address === b.address;
}
