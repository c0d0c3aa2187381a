// Which file holds the OpenSSL a process calls: a libssl.so it mapped
// (python's ssl module, most C clients), or its own executable when OpenSSL
// is linked in and exported (node). Read through the host's /proc, so that
// the path works from a pod for a process in another mount namespace.
import { BoundedMap } from "../../boundedMap.ts";
import { open, readFile, type FileHandle } from "node:fs/promises";
import path from "node:path";
import { openFileSource } from "../goBinary/byteSource.ts";
import { findSection, readElfImage } from "../goBinary/elfImage.ts";

interface OpenSsl {
  /** What bpftrace attaches to, e.g. /proc/4242/root/usr/lib/x86_64-linux-gnu/libssl.so.3 or /proc/4242/exe. */
  path: string;
  /** dev:inode: uprobes are per file, so one program serves every process using it. */
  key: string;
  /**
   * The file, opened as soon as it was found; the caller closes it. A one-shot
   * client can be gone, and its /proc path with it, before its program is
   * made: the program opens the file through this descriptor meanwhile.
   */
  handle: FileHandle;
}

/** A mapped libssl, as /proc/PID/maps names it (a file replaced since is "(deleted)": not probed). */
const LIBSSL = /\s(\/\S*\/libssl\.so(?:\.[\d.]+)?)$/m;

/** The functions the TLS program probes; an executable exporting them carries its own OpenSSL. */
const EXPORTED = ["SSL_read", "SSL_write", "SSL_do_handshake"];

/** Executables looked at, dev:inode → whether they export OpenSSL: a target without it is looked at again, its binary need not be. */
export type ExportsCache = BoundedMap<string, boolean>;

/** Executables remembered at most. */
const EXPORTS_CACHE_CAPACITY = 1024;

/**
 * Whether an executable (by device and inode) exports OpenSSL. A file
 * forgotten for room is only read again when a process runs it, so nothing is
 * lost and its evictions are not counted as drops.
 */
export function newExportsCache(): ExportsCache {
  return new BoundedMap(EXPORTS_CACHE_CAPACITY);
}

/** Where `pid`'s OpenSSL is, opened, or why none is found (yet: python maps libssl when it first imports ssl). */
export async function openSslOf(procRoot: string, pid: number, exportsCache: ExportsCache = newExportsCache()): Promise<OpenSsl | string> {
  const dir = path.join(procRoot, String(pid));
  let maps: string;
  try {
    maps = await readFile(path.join(dir, "maps"), "utf8");
  } catch (error) {
    return `cannot read its maps: ${String(error)}`;
  }
  const mapped = LIBSSL.exec(maps)?.[1];
  const file = mapped !== undefined ? path.join(dir, "root", mapped) : path.join(dir, "exe");
  let handle: FileHandle;
  let key: string;
  try {
    handle = await open(file, "r");
  } catch (error) {
    return `cannot read ${file}: ${String(error)}`;
  }
  try {
    const info = await handle.stat();
    key = `${info.dev}:${info.ino}`;
    if (mapped === undefined) {
      let exports = exportsCache.get(key);
      if (exports === undefined) {
        exports = await exportsOpenSsl(file);
        exportsCache.set(key, exports);
      }
      if (!exports) {
        await handle.close();
        return "no OpenSSL mapped";
      }
    }
  } catch (error) {
    await handle.close();
    return `cannot read ${file}: ${String(error)}`;
  }
  return { path: file, key, handle };
}

/** Whether an executable's dynamic symbol names include OpenSSL's (node exports them for addons). */
async function exportsOpenSsl(file: string): Promise<boolean> {
  try {
    const source = await openFileSource(file);
    try {
      const dynstr = findSection(await readElfImage(source), ".dynstr");
      if (dynstr === undefined) return false;
      const names = new Set((await source.read(dynstr.offset, dynstr.size, ".dynstr")).toString("latin1").split("\0"));
      return EXPORTED.every((name) => names.has(name));
    } finally {
      await source.close();
    }
  } catch {
    return false; // not an ELF file we can read: no OpenSSL of its own
  }
}
