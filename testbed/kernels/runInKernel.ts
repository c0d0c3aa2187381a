// runInKernel(kernel, command, { timeoutMs }): boots a Debian kernel in a VM
// over this machine's own filesystem (virtme-ng: the host's bpftrace, node,
// python and test binaries run inside unchanged), runs `command` there as
// root with tracefs and debugfs mounted, BPF allowed and loopback up, and
// returns its exit code and output. The repository and a scratch directory
// are mounted read-write, so the command can write results back; the rest of
// the host is seen read-only (writes land in a tmpfs overlay and vanish).
//
// qemu runs under software emulation (TCG) unless KERNELS_KVM=1:
// on the machine this was written on, qemu 7.2 with KVM asserted or hung.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ensureKernel, ensureVirtme, missingHostTools } from "./kernelCache.ts";
import { kernelNamed, type Kernel } from "./kernels.ts";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const GUEST_SCRIPT = path.join(REPO, "testbed/kernels/guest.sh");

interface RunOptions {
  /** Whole run, boot included; the VM is killed after it. */
  timeoutMs: number;
  /** Environment for the command, on top of the host's PATH, HOME and CI. */
  env?: Record<string, string>;
  /** More host directories the command may write to (the repository always is). */
  rwDirs?: string[];
  /** Guest memory (default 3G: the agent, three bpftrace programs, the test's servers). */
  memory?: string;
  /** Guest CPUs (default 2). */
  cpus?: number;
  /** Gets the VM's console (kernel messages) as it comes; default: kept for the result only. */
  console?: (chunk: string) => void;
}

interface RunResult {
  kernel: string;
  /** uname -r of the booted kernel. */
  release: string;
  /** The command's exit code; null when it never finished (boot failed, timeout). */
  exitCode: number | null;
  /** The command's stdout and stderr, interleaved as written. */
  output: string;
  /** The VM's console, for when the command never ran. */
  console: string;
  /** From starting qemu (virtme-ng prepares its initramfs first) to the command's start in the guest. */
  bootMs: number | null;
  /** From the command's start to its end. */
  runMs: number | null;
  timedOut: boolean;
}

const shellQuote = (value: string): string => `'${value.replaceAll("'", `'\\''`)}'`;

/** Waits for one of the VM's files to appear: the VM writes it over 9p, which no host file watch sees. */
async function waitForFile(file: string, until: () => boolean, intervalMs = 200): Promise<number | null> {
  while (!until()) {
    if (existsSync(file)) return Date.now();
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  return existsSync(file) ? Date.now() : null;
}

export async function runInKernel(kernelName: string | Kernel, command: string, opts: RunOptions): Promise<RunResult> {
  const missing = missingHostTools();
  if (missing.length) throw new Error(`the kernel runner needs ${missing.join(", ")}`);
  const kernel = typeof kernelName === "string" ? kernelNamed(kernelName) : kernelName;
  const image = ensureKernel(kernel);
  const vng = ensureVirtme();
  const scratch = mkdtempSync(path.join(os.tmpdir(), "lostwrite-kernel-"));
  const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root", ...(process.env.CI ? { CI: process.env.CI } : {}), ...opts.env };
  writeFileSync(
    path.join(scratch, "command.sh"),
    [...Object.entries(env).map(([k, v]) => `export ${k}=${shellQuote(v)}`), `cd ${shellQuote(REPO)}`, command, ""].join("\n"),
  );
  const args = [
    "--run", image.vmlinuz,
    ...(process.env.KERNELS_KVM === "1" ? [] : ["--disable-kvm"]),
    "--memory", opts.memory ?? "3G",
    "--cpus", String(opts.cpus ?? 2),
    "--rwdir", REPO,
    "--rwdir", scratch,
    ...(opts.rwDirs ?? []).flatMap((dir) => ["--rwdir", dir]),
    "--exec", `sh ${GUEST_SCRIPT} ${scratch}`,
  ];
  const started = Date.now();
  // virtme-ng runs depmod and qemu from PATH; Debian keeps depmod in /usr/sbin.
  const child = spawn(vng, args, { detached: true, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, PATH: `${path.dirname(vng)}:${process.env.PATH}:/usr/sbin:/sbin` } });
  let consoleText = "";
  const onConsole = (chunk: string): void => {
    consoleText += chunk;
    opts.console?.(chunk);
  };
  child.stdout.setEncoding("utf8").on("data", onConsole);
  child.stderr.setEncoding("utf8").on("data", onConsole);
  let exited = false;
  const done = new Promise<void>((resolve) => child.once("exit", () => ((exited = true), resolve())));
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {
      // already gone
    }
  }, opts.timeoutMs);
  const commandStarted = await waitForFile(path.join(scratch, "started"), () => exited || timedOut);
  const commandEnded = commandStarted === null ? null : await waitForFile(path.join(scratch, "exit-code"), () => exited || timedOut);
  await done;
  clearTimeout(timer);
  const read = (name: string): string | null => (existsSync(path.join(scratch, name)) ? readFileSync(path.join(scratch, name), "utf8") : null);
  const exitCode = read("exit-code");
  const result: RunResult = {
    kernel: kernel.name,
    release: image.release,
    exitCode: exitCode === null ? null : Number(exitCode.trim()),
    output: read("output") ?? "",
    console: consoleText,
    bootMs: commandStarted === null ? null : commandStarted - started,
    runMs: commandStarted === null || commandEnded === null ? null : commandEnded - commandStarted,
    timedOut,
  };
  rmSync(scratch, { recursive: true, force: true });
  return result;
}
