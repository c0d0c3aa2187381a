// Request-level probing of the Go targets: every target's executable is
// inspected once per binary (device and inode), in a child process; each
// binary whose HTTP/2 client can be hooked gets its own program
// (UprobePrograms; every probed file's program runs in one bpftrace,
// uprobeHost.ts), kept while the binary can run again and told which of its
// processes to follow.
// Everything else stays on the socket path alone, with the reason logged once
// per binary. Lines and attachments go to the loss graph, which applies them
// in order (goRequests.ts).
import { readlinkSync } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import path from "node:path";
import { BoundedMap } from "../../boundedMap.ts";
import { inspectGoBinaryApart } from "../goBinary/inspectApart.ts";
import type { GoBinaryInspected, GoBinaryReport, ProbePlacement } from "../goBinary/inspectGoBinary.ts";
import { DEBUG_BUILD_ID_ROOT, probeSymbolsOf, removeProbeSymbols, writeProbeSymbols } from "../goBinary/probeSymbolFile.ts";
import { kernelBtf } from "../probe/probeProgram.ts";
import { UprobePrograms, type UprobeContext } from "../probe/uprobePrograms.ts";
import type { TargetChanges } from "../targets/targetWatcher.ts";
import { GO_PROBE_ENV, renderGoProgram } from "./goProbeProgram.ts";
import { isGoRecord, type GoRecord } from "./goRequests.ts";
import type { GoConnectionSockets } from "../probe/adoptedConnections.ts";

/** Where the Go programs' lines and attachments go: the loss graph. */
export interface GoLines {
  addGoRecord(record: GoRecord): void;
  setGoAttached(pid: number, attached: boolean, atNs: bigint): void;
  /** `pid` is no target any more (at kernel time `atNs`). */
  forgetGoProcess(pid: number, atNs: bigint): void;
}

/**
 * The name the logs give a binary: the file the agent's descriptor on it
 * points at (read when its program is made, while the descriptor is held;
 * the process may be gone).
 */
function binaryName(descriptor: string, fallback: string): string {
  let target = fallback;
  try {
    target = readlinkSync(descriptor);
  } catch {
    // closed already (a later process's attempt): the inspected path will do
  }
  return path.basename(target).replace(/ \(deleted\)$/, "");
}

/** A target's executable as the agent opened it; `held` until the change that opened it is over (then closed). */
interface OpenBinary {
  key: string;
  handle: FileHandle;
  held: boolean;
}

interface GoProbesOptions extends UprobeContext {
  lines: GoLines;
  /** Where the connections' sockets go (go_conn_sk lines), for the socket probe to adopt; none: not kept. */
  connections?: GoConnectionSockets | null;
  /** Binaries remembered, probed or not (default 1024). */
  binaryCapacity?: number;
  /**
   * Where the debug files naming the probe points of binaries with symbols go
   * (probeSymbolFile.ts; default bcc's /usr/lib/debug/.build-id); null: such
   * binaries are probed at their functions' entries.
   */
  probeSymbolRoot?: string | null;
  /** The correlation window (ms): how long after a rejection a program prints a process's 2xx answers with their paths (go_http2.bt, IN FLIGHT). */
  correlationWindowMs?: number;
}

export class GoProbes {
  readonly name = "go probes";
  readonly #o: Required<GoProbesOptions>;
  /** dev:inode → what inspecting the binary found; a rejection says why it cannot be probed. */
  readonly #inspected = new Map<string, GoBinaryReport>();
  /** Each binary's latest target: whose /proc entry its program opens the binary through. */
  readonly #latestPid: BoundedMap<string, number>;
  /** Targets left to the socket path because their client's layout is not verified. */
  readonly #unverified = new Set<number>();
  readonly #programs: UprobePrograms;
  /**
   * The debug files written to name probe points, by binary; removed when the
   * agent stops. Not when a program's first follow line comes: bpftrace 0.17
   * runs BEGIN, which prints those, before it attaches the uprobes, whose
   * symbols it is still resolving then (tried: the programs of binaries with
   * symbols failed to attach).
   */
  readonly #symbolFiles = new Map<string, string>();

  constructor(opts: GoProbesOptions) {
    this.#o = { binaryCapacity: 1024, probeSymbolRoot: DEBUG_BUILD_ID_ROOT, correlationWindowMs: 10_000, onLine: () => {}, connections: null, ...opts };
    this.#latestPid = new BoundedMap(this.#o.binaryCapacity, () => this.#o.metrics.eventsDropped.inc({ stage: "go_probes", reason: "capacity" }));
    const { lines, metrics, connections } = this.#o;
    this.#programs = new UprobePrograms({
      what: "Go probe",
      attachedGauge: metrics.goProbesAttached,
      restarts: metrics.goProbeRestarts,
      onRecord: (record) => {
        if (record.type === "go_conn_sk") {
          connections?.found({ pid: record.pid, conn: record.conn, sk: record.sk, task: record.task });
          return;
        }
        if (record.type === "go_conn_closed") connections?.closed(record.pid, record.conn);
        if (isGoRecord(record)) lines.addGoRecord(record);
      },
      onAttached: (pid, attached, atNs) => lines.setGoAttached(pid, attached, atNs),
      ...this.#o,
    });
  }

  /** Nothing to start: a program starts when a target runs a binary it can follow (onTargets). */
  start(): void {}

  /** A target change; returns at once, the programs follow in the background. */
  onTargets(changes: TargetChanges): Promise<void> {
    this.#programs.enqueue(() => this.#apply(changes));
    return Promise.resolve();
  }

  async stop(): Promise<void> {
    await this.#programs.stop();
    for (const file of this.#symbolFiles.values()) removeProbeSymbols(file);
    this.#symbolFiles.clear();
  }

  /** A process its exec made followed, and that is no target. */
  unfollow(pid: number): Promise<void> {
    return this.#programs.unfollowEverywhere(pid);
  }

  async #apply({ added, removed }: TargetChanges): Promise<void> {
    for (const { pid } of removed) {
      this.#unverified.delete(pid);
      if (!this.#programs.isFollowed(pid)) continue;
      await this.#programs.remove(pid);
      this.#o.lines.forgetGoProcess(pid, this.#o.nowNs());
      this.#o.connections?.forgetProcess(pid);
    }
    for (const { pid } of added) {
      // Opened once, at once, and held until its program has opened the file
      // too: a kubectl lives a tenth of a second, less than inspecting its
      // binary takes, and its /proc/<pid>/exe goes with it.
      const binary = await this.#openBinary(pid);
      if (binary === null) continue;
      try {
        await this.#add(pid, binary);
      } finally {
        binary.held = false;
        await binary.handle.close();
      }
    }
    this.#o.metrics.goTargets.set({ coverage: "requests" }, this.#programs.followed);
    this.#o.metrics.goTargets.set({ coverage: "unverified_layout" }, this.#unverified.size);
  }

  async #add(pid: number, binary: OpenBinary): Promise<void> {
    const { key, handle } = binary;
    const inspected = this.#inspected.get(key) ?? (await this.#inspect(key, pid, handle));
    if (!inspected.ok) {
      if (inspected.unverifiedLayout) this.#unverified.add(pid);
      return;
    }
    const kernelOffsets = kernelBtf().offsets;
    if (typeof kernelOffsets === "string") {
      this.#o.log.warnRateLimited("go-probes-kernel-offsets", "Go HTTP/2 client found, but its program reads the kernel's sockets at field offsets from the kernel's BTF, which are not known: socket path only", { pid, reason: kernelOffsets });
      return;
    }
    this.#latestPid.set(key, pid);
    const latestPid = (): number => this.#latestPid.get(key) ?? pid;
    const exe = (of: number): string => this.#exe(of);
    const held = `/proc/${process.pid}/fd/${handle.fd}`;
    await this.#programs.add(pid, key, () => ({
      // While this change runs, the agent's own descriptor (whatever became
      // of the process); later, when its program could not be started then,
      // through the binary's latest target's /proc entry: that works in a
      // pod, and for a binary deleted since.
      get path() {
        return binary.held ? held : exe(latestPid());
      },
      render: (file, follow) => renderGoProgram({ binary: file, families: inspected.families, probePlacement: this.#placement(key, pid, inspected), correlationWindowMs: this.#o.correlationWindowMs, kernelOffsets, ...follow }),
      flags: ["--unsafe"],
      env: { ...GO_PROBE_ENV },
      details: { file: binaryName(held, inspected.path), go: inspected.goVersion, families: inspected.families.map((f) => f.name) },
    }));
  }

  /**
   * Where a program about to start probes the binary: in a binary with
   * symbols, at the jumps past the stack checks when the debug file naming
   * them can be written now (probeSymbolFile.ts), else at the entries.
   */
  #placement(key: string, pid: number, inspected: GoBinaryInspected): ProbePlacement {
    if (inspected.probePlacement !== "entry" || inspected.buildId === null || this.#o.probeSymbolRoot === null) return inspected.probePlacement;
    const written = writeProbeSymbols(inspected.buildId, probeSymbolsOf(inspected.families), this.#o.probeSymbolRoot);
    if ("file" in written) {
      this.#symbolFiles.set(key, written.file);
      return "named branch";
    }
    this.#o.log.warnRateLimited(`go-probe-symbols-${key}`, "Go binary with symbols: its uprobes go at the function entries, which cost more; the debug file naming its probe points could not be written", { pid, reason: written.reason });
    return "entry";
  }

  /** The target's executable, open, and its key (dev:inode); null when it cannot be read. */
  async #openBinary(pid: number): Promise<OpenBinary | null> {
    let handle: FileHandle | null = null;
    try {
      handle = await open(this.#exe(pid), "r");
      const info = await handle.stat();
      return { key: `${info.dev}:${info.ino}`, handle, held: true };
    } catch (error) {
      await handle?.close();
      // Gone already, or /proc/<pid>/exe unreadable (without CAP_SYS_PTRACE in a pod).
      this.#o.log.warnRateLimited("go-probes-exe", "cannot read a target's executable; it stays on the socket path", { pid, error: String(error) });
      return null;
    }
  }

  async #inspect(key: string, pid: number, handle: FileHandle): Promise<GoBinaryReport> {
    // In a child process: what reading its DWARF takes is not kept by the agent.
    const report = await inspectGoBinaryApart(this.#exe(pid), { handle });
    if (report.ok) {
      this.#o.log.info("Go HTTP/2 client found: requests are followed", {
        pid, go: report.goVersion, xNet: report.xNet?.version ?? null, families: report.families.map((f) => f.name), uprobesAt: report.probePlacement,
        layoutFrom: report.families.map((f) => f.layoutFrom),
        ...(report.unverifiedFamilies.length > 0 ? { notFollowed: report.unverifiedFamilies.map((f) => f.reason) } : {}),
      });
      for (const family of report.families.filter((f) => f.differsFromTable.length > 0)) {
        // Read as the binary says; worth a row in the verified table.
        this.#o.log.warn("Go binary's DWARF places fields elsewhere than the verified layout of its versions; its DWARF is followed", {
          pid, go: report.goVersion, xNet: report.xNet?.version ?? null, family: family.name, differences: family.differsFromTable,
        });
      }
    } else if (report.unverifiedLayout) {
      this.#o.log.warn("Go HTTP/2 client of a version whose layout is not verified: socket path only", { pid, reason: report.reason });
    } else {
      this.#o.log.info("target binary cannot be followed per request; socket path only", { pid, reason: report.reason });
    }
    this.#inspected.set(key, report);
    if (this.#inspected.size > this.#o.binaryCapacity) {
      // Forget the oldest binary that no target runs any more.
      for (const oldKey of this.#inspected.keys()) {
        if (this.#programs.pidsOf(oldKey) === 0 && oldKey !== key) {
          this.#inspected.delete(oldKey);
          this.#o.metrics.eventsDropped.inc({ stage: "go_probes", reason: "capacity" });
          break;
        }
      }
    }
    return report;
  }

  #exe(pid: number): string {
    return path.join(this.#o.procRoot, String(pid), "exe");
  }
}
