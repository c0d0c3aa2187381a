// node testbed/operator/main.ts --kubeconfig FILE [--mode correct|swallow|update-main] [--workers N]
// Logs JSON lines on stdout; the first is {"msg":"started",…} once the informer has listed.
import { Command, InvalidArgumentError, Option } from "commander";
import { startOperator } from "./controller.ts";
import { MODES, type Mode } from "./reconciler.ts";
import { startTelemetry } from "./telemetry.ts";

function positiveInt(name: string): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${name}: expected a positive integer, got ${JSON.stringify(value)}`);
    return n;
  };
}

const program = new Command("widget-operator")
  .description("Sample operator reconciling widgets.demo.lostwrite.dev, instrumented with OpenTelemetry")
  .requiredOption("--kubeconfig <file>", "kubeconfig of the apiserver")
  .addOption(new Option("--mode <mode>", "how status-write errors are handled").choices(MODES).default("correct"))
  .option("--workers <n>", "concurrent reconcile workers", positiveInt("--workers"), 2)
  .option("--namespace <ns>", "watch only this namespace (default: all)")
  .option("--backoff-base-ms <n>", "first requeue delay after a failure", positiveInt("--backoff-base-ms"), 100)
  .option("--backoff-max-ms <n>", "longest requeue delay", positiveInt("--backoff-max-ms"), 5000)
  .option("--throttle-retries <n>", "like client-go, wait out a 429's retry-after and send again, up to n times (default 0)", positiveInt("--throttle-retries"), 0)
  .parse();

const flags = program.opts<{ kubeconfig: string; mode: Mode; workers: number; namespace?: string; backoffBaseMs: number; backoffMaxMs: number; throttleRetries: number }>();
const log = (fields: Record<string, unknown>): void => {
  console.log(JSON.stringify({ time: new Date().toISOString(), level: "info", ...fields }));
};

const telemetry = startTelemetry("widget-operator");
const operator = await startOperator({
  kubeconfigPath: flags.kubeconfig, mode: flags.mode, workers: flags.workers, tracer: telemetry.tracer, log,
  namespace: flags.namespace, baseDelayMs: flags.backoffBaseMs, maxDelayMs: flags.backoffMaxMs, throttleRetries: flags.throttleRetries,
});
log({ msg: "started", pid: process.pid, mode: flags.mode, workers: flags.workers });

const stop = (): void => {
  operator.stop()
    .then(() => telemetry.shutdown())
    .then(() => process.exit(0), (error: unknown) => {
      console.error(error);
      process.exit(1);
    });
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
