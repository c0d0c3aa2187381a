// The per-file uprobe programs: Go requests (goHttp2/) and TLS answers
// (tls/), each turned on by its flag. They follow processes as the socket
// probe makes targets, from exec, through one follow channel; their lines go
// to the loss graph: Go lines straight in (the graph orders them), TLS
// verdicts and attachments into the probe records' queue, so that they are
// applied between the same records live and in replay.
import type { Config } from "../config.ts";
import type { Logger } from "../telemetry/log.ts";
import type { AgentMetrics } from "../telemetry/metrics.ts";
import { stage, type Stage } from "../stage.ts";
import { GoProbes, type GoLines } from "./goHttp2/goProbes.ts";
import type { GoConnectionSockets } from "./probe/adoptedConnections.ts";
import type { CompilerPages } from "./probe/compilerPages.ts";
import { FollowChannel } from "./probe/followChannel.ts";
import type { ProbeRecord } from "./probe/probeOutput.ts";
import { tracepointAvailable } from "./probe/probeProgram.ts";
import type { RecordWriter } from "./record/writer.ts";
import type { TargetChanges } from "./targets/targetWatcher.ts";
import type { TlsAttachment } from "./tls/tlsAnswers.ts";
import { TLS_TRACEPOINT } from "./tls/tlsProbeProgram.ts";
import { TlsProbes } from "./tls/tlsProbes.ts";
import { UprobeHost } from "./probe/uprobeHost.ts";
import { newProgramsCanMatch } from "./targets/targetRules.ts";

interface UprobeSourcesOptions {
  config: Config;
  agentHostPid: number;
  /** Whether a pid is a target now. */
  isTarget: (pid: number) => boolean;
  /** Where Go programs' lines and attachments go: the loss graph. */
  goLines: GoLines;
  /** Where the Go operators' connection sockets go, for the socket probe. */
  goConnections: GoConnectionSockets;
  /** The probe records' queue, for TLS verdicts and attachments. */
  records: { push(record: ProbeRecord | TlsAttachment): boolean };
  recorder: RecordWriter | null;
  metrics: AgentMetrics;
  log: Logger;
  /** Where every bpftrace takes its turn to compile (compilerPages.ts). */
  compilerPages?: CompilerPages;
}

export class UprobeSources {
  readonly go: GoProbes | null;
  readonly tls: TlsProbes | null;
  readonly #follow = new FollowChannel();
  /**
   * The bpftrace of every probed file's program, Go binaries and OpenSSL
   * files alike: a bpftrace holds about 30 MiB of its own however small its
   * program, and a file coming in waits for no merge of the others (its
   * program starts alone, and joins the others once the files settle:
   * uprobeHost.ts).
   */
  readonly #host: UprobeHost;

  constructor(opts: UprobeSourcesOptions) {
    const { config, recorder, log } = opts;
    this.#host = new UprobeHost({
      bpftrace: config.bpftrace, agentHostPid: opts.agentHostPid, metrics: opts.metrics, log,
      ...(opts.compilerPages ? { compilerPages: opts.compilerPages } : {}),
    });
    const context = {
      follow: this.#follow,
      execWatch: newProgramsCanMatch(config),
      isTarget: opts.isTarget,
      procRoot: config["proc-root"],
      metrics: opts.metrics,
      log,
      // bpftrace's nsecs is CLOCK_MONOTONIC, which hrtime reads.
      nowNs: () => process.hrtime.bigint(),
    };
    this.go = config["go-probes"]
      ? new GoProbes({ ...context, host: this.#host, lines: opts.goLines, connections: opts.goConnections, correlationWindowMs: config["correlation-window"], ...(recorder ? { onLine: (line: string) => recorder.goProbeLine(line) } : {}) })
      : null;
    // OpenSSL clients' connections are judged by what SSL_read returned: a TLS
    // 1.3 session ticket arriving after the first request is no answer. The TLS
    // program ties an SSL object to its socket on sock:sock_send_length (Linux
    // 6.3+): on older kernels bpftrace refuses it, so it is not started at all.
    const tlsTracepoint = tracepointAvailable(TLS_TRACEPOINT);
    if (config["tls-probes"] && !tlsTracepoint) {
      log.warn("TLS answers need the kernel's sock:sock_send_length tracepoint (Linux 6.3+), which this kernel lacks: OpenSSL clients are judged on the socket path");
    }
    this.tls = config["tls-probes"] && tlsTracepoint
      ? new TlsProbes({
          ...context,
          host: this.#host,
          onVerdict: (record) => opts.records.push(record),
          // In the records' queue, in the order recorded: applied between the same records live and in replay.
          onAttached: (pid, attached, atNs) => {
            opts.records.push({ type: "tls_attached", pid, attached, since: atNs });
            recorder?.tlsAttached(pid, attached, attached ? atNs : undefined);
          },
          ...(recorder ? { onLine: (line: string) => recorder.tlsProbeLine(line) } : {}),
        })
      : null;
  }

  /** Follows the targets' changes: a program per file their processes run. */
  followTargets(targets: { onChange(listener: (changes: TargetChanges) => Promise<void>): void }): void {
    const { go, tls } = this;
    if (go) targets.onChange((changes) => go.onTargets(changes));
    if (tls) targets.onChange((changes) => tls.onTargets(changes));
  }

  /** A process its exec made followed, and that is no target. */
  async unfollow(pid: number): Promise<void> {
    await this.go?.unfollow(pid);
    await this.tls?.unfollow(pid);
  }

  /** The follow channel, opened before the first target is found. */
  channelStages(): Stage[] {
    return this.go || this.tls ? [stage("follow channel", () => this.#follow.open(), () => this.#follow.close())] : [];
  }

  /**
   * The programs, started after the socket probe. Their bpftrace is stopped
   * before them (stages stop in reverse), so that taking their files out at
   * shutdown restarts nothing.
   */
  programStages(): Stage[] {
    const sources = [...(this.go ? [this.go] : []), ...(this.tls ? [this.tls] : [])];
    return sources.length === 0
      ? []
      : [...sources, stage("uprobe programs' bpftrace", () => undefined, () => this.#host.stop())];
  }
}
