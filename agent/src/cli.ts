#!/usr/bin/env node
// The `lostwrite` command. Flags are declared once per config key (config.ts
// owns the schema); commander only collects what the user typed, and
// loadConfig() merges flags > env > file > defaults and validates.
import { Command, Option } from "commander";
import { ConfigError, configFromEnv, configFromFile, envName, loadConfig, type Config } from "./config.ts";
import { createLogger, type Logger } from "./telemetry/log.ts";

const FLAGS: { key: keyof Config; flag: string; help: string; repeatable?: boolean; boolean?: boolean }[] = [
  { key: "target-pid", flag: "--target-pid <pid>", help: "watch this process (repeatable)", repeatable: true },
  { key: "target-comm", flag: "--target-comm <regex>", help: "watch processes whose comm matches" },
  { key: "target-cmdline", flag: "--target-cmdline <regex>", help: "watch processes whose command line matches" },
  { key: "kubernetes", flag: "--kubernetes", help: "watch operator pods on this node", boolean: true },
  { key: "watch-label-selector", flag: "--watch-label-selector <selector>", help: "with --kubernetes: also watch pods matching this label selector" },
  { key: "kubeconfig", flag: "--kubeconfig <file>", help: "with --kubernetes outside a cluster: the kubeconfig to use (a token or client certificate; credential plugins are refused)" },
  { key: "node-name", flag: "--node-name <name>", help: "node name for events (default: hostname)" },
  { key: "apiserver", flag: "--apiserver <host:port>", help: "an apiserver endpoint, IP:PORT (repeatable)", repeatable: true },
  { key: "listen", flag: "--listen <addr:port>", help: "/metrics, /healthz, /readyz, /events (default 127.0.0.1:9470)" },
  { key: "otlp-listen", flag: "--otlp-listen <addr:port>", help: "OTLP/HTTP span intake (default 127.0.0.1:4318)" },
  { key: "otlp-grpc-listen", flag: "--otlp-grpc-listen <addr:port>", help: "OTLP/gRPC span intake, or off (default 127.0.0.1:4317)" },
  { key: "otlp-forward", flag: "--otlp-forward <url>", help: "pass every received span batch on to this OTLP/HTTP URL" },
  {
    key: "otlp-forwarders",
    flag: "--otlp-forwarders <selector>",
    help: "a sender whose span resources are taken as sent (a local Collector): exe:/PATH or pod:NAMESPACE/NAME[*] (repeatable)",
    repeatable: true,
  },
  { key: "record", flag: "--record <file>", help: "record the probe stream and received spans for replay" },
  { key: "correlation-window", flag: "--correlation-window <duration>", help: "longest wait for spans (default 10s)" },
  {
    key: "span-grace",
    flag: "--span-grace <duration>",
    help: "how long a new target that has sent no span yet still has its losses wait for spans (default 60s); after it, they are reported at once",
  },
  { key: "probe-variant", flag: "--probe-variant <variant>", help: "auto, sockets or syscalls (default auto)" },
  {
    key: "send-hook",
    flag: "--send-hook <needed-by>",
    help: "what keeps the socket probe's program on every send of the node: rules (default; also a rule that can match a program started later, seen from its exec) or targets (only a target not followed per request; a program a rule matches later waits about a second for it)",
  },
  { key: "bpftrace", flag: "--bpftrace <path>", help: "bpftrace binary (default: bpftrace on PATH)" },
  { key: "rescan-interval", flag: "--rescan-interval <duration>", help: "how often targets are rescanned (default 1s)" },
  { key: "proc-root", flag: "--proc-root <path>", help: "the host's /proc (default /proc)" },
  { key: "unanswered-min-bytes", flag: "--unanswered-min-bytes <n>", help: "smallest unanswered send that is a request (default 64)" },
  { key: "go-probes", flag: "--no-go-probes", help: "do not follow Go targets' HTTP/2 requests with uprobes (on by default)", boolean: true },
  { key: "tls-probes", flag: "--no-tls-probes", help: "do not judge OpenSSL targets' connections by what SSL_read returned (on by default)", boolean: true },
];

function camel(key: string): string {
  return key.replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase());
}

function addConfigFlags(command: Command): Command {
  command.option("--config <file>", "YAML config file (keys are the flag names)");
  for (const f of FLAGS) {
    const option = new Option(f.flag, `${f.help} [env ${envName(f.key)}]`);
    if (f.repeatable) option.argParser((value: string, previous: string[] | undefined) => [...(previous ?? []), value]);
    // A --no-x flag alone would default x to true and hide the env and the file.
    if (f.flag.startsWith("--no-")) option.default(undefined);
    command.addOption(option);
  }
  return command;
}

/**
 * The config from every source; throws ConfigError when it is invalid. The
 * LOSTWRITE_* variables Kubernetes service links injected are ignored, with
 * one warning on `log`.
 */
export function resolveConfig(opts: Record<string, unknown>, log: Pick<Logger, "warn">): Config {
  const flags: Record<string, unknown> = {};
  for (const f of FLAGS) if (opts[camel(f.key)] !== undefined) flags[f.key] = opts[camel(f.key)];
  const file = (opts.config as string | undefined) ?? process.env.LOSTWRITE_CONFIG;
  const env = configFromEnv(process.env);
  if (env.serviceLinks.length > 0) {
    log.warn("ignoring LOSTWRITE_* variables set by Kubernetes service links (set enableServiceLinks: false in the pod spec)", {
      variables: env.serviceLinks,
    });
  }
  return loadConfig([
    { name: file ? `config file "${file}"` : "config file", values: file ? configFromFile(file) : {} },
    { name: "environment", values: env.values },
    { name: "flag", values: flags },
  ]);
}

function configOrExit(opts: Record<string, unknown>, log: Logger): Config {
  try {
    return resolveConfig(opts, log);
  } catch (err) {
    fail(err);
  }
}

function fail(err: unknown): never {
  process.stderr.write(`lostwrite: ${err instanceof ConfigError || err instanceof Error ? err.message : String(err)}\n`);
  process.exit(2);
}

const program = new Command("lostwrite")
  .description("Catches the status writes Kubernetes operators lose on the way to the kube-apiserver.")
  .showHelpAfterError();

addConfigFlags(program.command("agent").description("run the node agent (the DaemonSet process)")).action(
  async (opts: Record<string, unknown>) => {
    const log = createLogger(process.stderr);
    const config = configOrExit(opts, log);
    const { startAgent } = await import("./pipeline.ts");
    let agent: Awaited<ReturnType<typeof startAgent>>;
    try {
      agent = await startAgent(config, log);
    } catch (err) {
      fail(err);
    }
    let stopping = false;
    const stop = (signal: string): void => {
      if (stopping) return;
      stopping = true;
      log.info("stopping", { signal });
      agent.close().then(
        () => process.exit(0),
        (err: unknown) => fail(err),
      );
    };
    process.on("SIGINT", () => stop("SIGINT"));
    process.on("SIGTERM", () => stop("SIGTERM"));
  },
);

addConfigFlags(program.command("probe").description("print the rendered bpftrace program for the given targets")).action(
  async (opts: Record<string, unknown>) => {
    const config = configOrExit(opts, createLogger(process.stderr));
    const { renderProbeForConfig } = await import("./probeCommand.ts");
    process.stdout.write(await renderProbeForConfig(config));
  },
);

// The agent's own flags, env and config file: run in the pod, doctor checks
// exactly what the agent there would use (its --proc-root, its bpftrace).
// With --binary it only says whether that operator binary is covered.
addConfigFlags(
  program
    .command("doctor")
    .description("check kernel, tracefs, BTF, bpftrace, privileges and the host /proc; say what to fix")
    .option("--binary <path>", "only say, in one line, whether this operator binary's requests are followed one by one, and why not"),
).action(async (opts: Record<string, unknown>) => {
  if (typeof opts.binary === "string") {
    const { runBinaryCoverage } = await import("./binaryCoverage.ts");
    process.exitCode = await runBinaryCoverage(opts.binary, process.stdout);
    return;
  }
  const config = configOrExit(opts, createLogger(process.stderr));
  const { runDoctor } = await import("./doctor.ts");
  process.exitCode = await runDoctor({ bpftrace: config.bpftrace, procRoot: config["proc-root"], out: process.stdout });
});

program
  .command("tail")
  .description("print live loss events from an agent's /events")
  .argument("[url]", "the agent's events URL", "ws://127.0.0.1:9470/events")
  .option("--json", "print raw JSON lines")
  .option("--since <time>", "replay events since this RFC 3339 time first")
  .action(async (url: string, opts: { json?: boolean; since?: string }) => {
    const { runTail } = await import("./tail.ts");
    const { shouldColor } = await import("./tail.ts");
    const stop = new AbortController();
    process.once("SIGINT", () => stop.abort());
    await runTail(url, {
      json: Boolean(opts.json),
      out: process.stdout,
      color: shouldColor(process.stdout),
      signal: stop.signal,
      ...(opts.since ? { since: opts.since } : {}),
    });
  });

program
  .command("demo")
  .description("the whole system on one machine: testbed apiserver, sample operator, agent with real probes, a fault script")
  .option("--duration <duration>", "how long the fault script runs")
  .option("--keep-running", "leave everything up after the script, to browse /metrics")
  .option("--scenario <file>", "a fault scenario file instead of the built-in one")
  .option("--record <file>", "record the session for `lostwrite replay`")
  .option("--listen <addr:port>", "the agent's /metrics, /events", "127.0.0.1:9470")
  .option("--no-install", "as root on Debian or Ubuntu the demo installs bpftrace and mounts tracefs when missing; this refuses")
  .action(async (opts: Record<string, unknown>) => {
    const { runDemo } = await import("./demo/runDemo.ts");
    process.exitCode = await runDemo(opts);
  });

program
  .command("replay")
  .description("run the pipeline from a --record file: no root, no bpftrace")
  .argument("<file>", "a file written by --record")
  .option("--json", "print loss events as JSON lines (default: one readable line each)")
  .action(async (file: string, opts: { json?: boolean }) => {
    const { runReplay } = await import("./replay.ts");
    process.exitCode = await runReplay(file, { json: Boolean(opts.json), out: process.stdout });
  });

await program.parseAsync(process.argv);
