// Kernels and the VM runner, fetched once into a cache directory and never
// installed on the host: each kernel's .deb comes from Debian's archive
// through apt-get with an apt state of its own under the cache (so the host's
// sources list, /boot and /lib/modules stay untouched) and is unpacked there
// with dpkg-deb; virtme-ng goes into a venv there.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Kernel } from "./kernels.ts";

/** virtme-ng, pinned: the runner relies on its command line and its guest init. */
const VIRTME_NG = "virtme-ng==1.42";

const ARCHIVE: Record<Kernel["suite"], string[]> = {
  bookworm: ["http://deb.debian.org/debian bookworm main", "http://deb.debian.org/debian-security bookworm-security main"],
  bullseye: ["http://deb.debian.org/debian bullseye main", "http://deb.debian.org/debian-security bullseye-security main"],
};

export function cacheDir(): string {
  if (process.env.KERNELS_CACHE_DIR) return process.env.KERNELS_CACHE_DIR;
  if (process.env.XDG_CACHE_HOME) return path.join(process.env.XDG_CACHE_HOME, "lostwrite-kernels");
  return process.getuid?.() === 0 ? "/var/cache/lostwrite-kernels" : path.join(os.homedir(), ".cache", "lostwrite-kernels");
}

const log = (line: string): void => console.error(`kernels: ${line}`);

/** apt-get options for an apt state of `suite` under the cache. */
function aptOptions(suite: Kernel["suite"]): string[] {
  const dir = path.join(cacheDir(), "apt", suite);
  const sources = path.join(dir, "sources.list");
  if (!existsSync(sources)) {
    mkdirSync(path.join(dir, "lists", "partial"), { recursive: true });
    mkdirSync(path.join(dir, "archives", "partial"), { recursive: true });
    writeFileSync(sources, ARCHIVE[suite].map((uri) => `deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${uri}\n`).join(""));
  }
  return [
    `-o`, `Dir::Etc::SourceList=${sources}`, `-o`, `Dir::Etc::SourceParts=/dev/null`,
    `-o`, `Dir::State::Lists=${path.join(dir, "lists")}`, `-o`, `Dir::Cache=${dir}`, `-o`, `Dir::Cache::Archives=${path.join(dir, "archives")}`,
  ];
}

interface CachedKernel {
  /** The kernel image. */
  vmlinuz: string;
  /** The unpacked package: virtme-ng finds the modules under its lib/modules, above the image. */
  root: string;
  /** uname -r of the kernel. */
  release: string;
}

/** The kernel's image and modules, downloaded and unpacked on first use. */
export function ensureKernel(kernel: Kernel): CachedKernel {
  const root = path.join(cacheDir(), "kernels", kernel.package);
  const boot = path.join(root, "boot");
  if (!existsSync(boot)) {
    const debs = path.join(cacheDir(), "debs");
    mkdirSync(debs, { recursive: true });
    if (!readdirSync(debs).some((f) => f.startsWith(`${kernel.package}_`))) {
      const apt = aptOptions(kernel.suite);
      log(`fetching ${kernel.package} from Debian ${kernel.suite}`);
      const lists = path.join(cacheDir(), "apt", kernel.suite, "lists");
      if (!readdirSync(lists).some((f) => f.endsWith("_Packages"))) execFileSync("apt-get", [...apt, "update", "-qq"], { stdio: "inherit" });
      execFileSync("apt-get", [...apt, "download", kernel.package], { cwd: debs, stdio: ["ignore", "ignore", "inherit"] });
    }
    const deb = readdirSync(debs).find((f) => f.startsWith(`${kernel.package}_`))!;
    mkdirSync(root, { recursive: true });
    execFileSync("dpkg-deb", ["-x", path.join(debs, deb), root]);
  }
  const image = readdirSync(boot).find((f) => f.startsWith("vmlinuz-"));
  if (!image) throw new Error(`${kernel.package}: no vmlinuz in ${boot}`);
  return { vmlinuz: path.join(boot, image), root, release: image.slice("vmlinuz-".length) };
}

/** The vng command of a virtme-ng installed in a venv under the cache. */
export function ensureVirtme(): string {
  const venv = path.join(cacheDir(), "venv");
  const vng = path.join(venv, "bin", "vng");
  if (!existsSync(vng)) {
    log(`installing ${VIRTME_NG} into ${venv}`);
    execFileSync("python3", ["-m", "venv", venv], { stdio: "inherit" });
    execFileSync(path.join(venv, "bin", "pip"), ["install", "-q", VIRTME_NG], { stdio: "inherit" });
  }
  return vng;
}

/** The host tools virtme-ng runs, by Debian package: named when missing rather than failing deep inside it. */
const HOST_TOOLS: Record<string, string> = { "qemu-system-x86_64": "qemu-system-x86", depmod: "kmod", busybox: "busybox-static" };

export function missingHostTools(): string[] {
  const pathDirs = (process.env.PATH ?? "").split(":").concat(["/usr/sbin", "/sbin"]);
  return Object.entries(HOST_TOOLS)
    .filter(([tool]) => !pathDirs.some((dir) => existsSync(path.join(dir, tool))))
    .map(([tool, pkg]) => `${tool} (apt-get install ${pkg})`);
}
