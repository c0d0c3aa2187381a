// Which process holds the client end of a connection the agent accepted: the
// kernel's answer to "who sent these spans", where the request body can only
// make claims. The client socket's inode is found in the TCP table of the
// sender's network namespace (procNetTcp.ts), then the process whose file
// descriptors include `socket:[INODE]`.
//
// The table read is the agent's own namespace's (loopback and, on a host
// network, every local sender), then the namespaces of the target processes,
// through /proc/<pid>/net/tcp of one target each (a pod's sender shares its
// pod's). The holder is looked for among the targets first: they are the
// processes whose spans matter, and few. Only when none holds it are the
// other processes of the proc root read, bounded, so that a stranger can be
// named in the log or a configured forwarder recognised.
import { readdir, readFile, readlink } from "node:fs/promises";
import path from "node:path";
import { isLoopbackAddress } from "../../ipAddress.ts";
import { type AcceptedConnection, findClientSocket, parseProcNetTcp } from "./procNetTcp.ts";

interface SocketOwnerOptions {
  /** The host's /proc as the agent sees it (--proc-root). */
  procRoot: string;
  /** Host pids of the target processes now. */
  targets: () => readonly number[];
  /** Processes read when no target holds the socket; more are not looked at (default 4096). */
  maxScannedProcesses?: number;
  /** File descriptors read per process; a process with more is not looked at further (default 65536). */
  maxFdsPerProcess?: number;
}

export interface SocketOwner {
  inode: number;
  /** Host pids holding the socket (a forked child may share it), targets first; empty when none was found within the bounds. */
  pids: number[];
  /** The scan of non-targets stopped at its bound before finding the holder. */
  truncated: boolean;
}

/** Holders listed at most: a socket shared further is still judged by the first ones. */
const MAX_HOLDERS = 8;

/** The client end of `connection` and who holds it; null when the socket is in no namespace the agent reads. */
export async function findSocketOwner(opts: SocketOwnerOptions, connection: AcceptedConnection): Promise<SocketOwner | null> {
  const found = await findClientInode(opts, connection);
  if (found === null) return null;
  const { inode, namespace } = found;
  const link = `socket:[${inode}]`;
  const targets = opts.targets();
  const maxFds = opts.maxFdsPerProcess ?? 65_536;
  const holders: number[] = [];
  const targetHolds = await Promise.all(
    targets.map(async (pid) => ((namespace === null || (await netNamespaceOf(opts.procRoot, pid)) === namespace) && (await holds(opts.procRoot, pid, link, maxFds)) ? pid : null)),
  );
  for (const pid of targetHolds) if (pid !== null && holders.length < MAX_HOLDERS) holders.push(pid);
  if (holders.length > 0) return { inode, pids: holders, truncated: false };

  const known = new Set(targets);
  const max = opts.maxScannedProcesses ?? 4096;
  let scanned = 0;
  let truncated = false;
  for (const pid of await listPids(opts.procRoot)) {
    if (known.has(pid)) continue;
    if (scanned++ >= max) {
      truncated = true;
      break;
    }
    if (await holds(opts.procRoot, pid, link, maxFds)) {
      holders.push(pid);
      if (holders.length >= MAX_HOLDERS) break;
    }
  }
  return { inode, pids: holders, truncated: truncated && holders.length === 0 };
}

/**
 * The inode of the client socket, and the namespace it was found in (its
 * `net:[…]` link; null for the agent's own, which any process may share).
 */
async function findClientInode(opts: SocketOwnerOptions, connection: AcceptedConnection): Promise<{ inode: number; namespace: string | null } | null> {
  const own = await findIn(path.join(opts.procRoot, "self", "net"), connection, true);
  if (own !== null) return { inode: own, namespace: null };
  // Loopback never leaves a namespace: a loopback client is in the agent's or nowhere readable.
  if (isLoopbackAddress(connection.client.address)) return null;
  const ownNamespace = await readlinkOrNull(path.join(opts.procRoot, "self", "ns", "net"));
  const seen = new Set<string>(ownNamespace === null ? [] : [ownNamespace]);
  for (const pid of opts.targets()) {
    const namespace = await netNamespaceOf(opts.procRoot, pid);
    if (namespace === null || seen.has(namespace)) continue;
    seen.add(namespace);
    const inode = await findIn(path.join(opts.procRoot, String(pid), "net"), connection, false);
    if (inode !== null) return { inode, namespace };
  }
  return null;
}

async function findIn(netDir: string, connection: AcceptedConnection, sameNamespace: boolean): Promise<number | null> {
  for (const file of ["tcp", "tcp6"]) {
    let text: string;
    try {
      text = await readFile(path.join(netDir, file), "utf8");
    } catch {
      continue; // no IPv6 in this kernel or namespace, or the process is gone
    }
    const inode = findClientSocket(parseProcNetTcp(text), connection, sameNamespace);
    if (inode !== null) return inode;
  }
  return null;
}

function netNamespaceOf(procRoot: string, pid: number): Promise<string | null> {
  return readlinkOrNull(path.join(procRoot, String(pid), "ns", "net"));
}

/** Whether one of the process's file descriptors is `link` (a process that is gone or unreadable holds nothing). */
async function holds(procRoot: string, pid: number, link: string, maxFds: number): Promise<boolean> {
  const dir = path.join(procRoot, String(pid), "fd");
  let fds: string[];
  try {
    fds = await readdir(dir);
  } catch {
    return false;
  }
  for (const fd of fds.slice(0, maxFds)) {
    if ((await readlinkOrNull(path.join(dir, fd))) === link) return true;
  }
  return false;
}

async function listPids(procRoot: string): Promise<number[]> {
  try {
    return (await readdir(procRoot)).filter((name) => /^\d+$/.test(name)).map(Number);
  } catch {
    return [];
  }
}

async function readlinkOrNull(file: string): Promise<string | null> {
  try {
    return await readlink(file);
  } catch {
    return null;
  }
}
