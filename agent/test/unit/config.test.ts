// One schema for flags, env and file: precedence, rejection of unknown keys,
// errors that name the key and the value, and the shipped files validate.
// LOSTWRITE_* variables that Kubernetes service links inject (the kubelet's
// docker-links names and value shapes, pkg/kubelet/envvars) are returned as
// ignored instead of aborting start-up, and the CLI logs them in one warning;
// anything else unknown still throws.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { parse as parseYaml } from "yaml";
import { CONFIG_KEYS, ConfigError, configFromEnv, configFromFile, configSchema, envName, isServiceLinkVariable, loadConfig } from "../../src/config.ts";
import { repoPath } from "../repoPath.ts";

const repo = (p: string): string => repoPath(p);

describe("config", () => {
  it("merges flags over env over file over defaults", () => {
    const config = loadConfig([
      { name: "config file", values: { listen: "127.0.0.1:1", "otlp-listen": "127.0.0.1:2", "correlation-window": "3s" } },
      { name: "environment", values: configFromEnv({ LOSTWRITE_LISTEN: "127.0.0.1:10", LOSTWRITE_APISERVER: "10.0.0.1:443,[fd00::1]:6443" }).values },
      { name: "flag", values: { listen: "127.0.0.1:100", "target-pid": ["12", "13"] } },
    ]);
    assert.equal(config.listen, "127.0.0.1:100");
    assert.equal(config["otlp-listen"], "127.0.0.1:2");
    assert.equal(config["correlation-window"], 3000);
    assert.deepEqual(config.apiserver, ["10.0.0.1:443", "[fd00::1]:6443"]);
    assert.deepEqual(config["target-pid"], [12, 13]);
    assert.equal(config["rescan-interval"], 1000);
    assert.equal(config["go-probes"], true, "Go request probes are on unless turned off");
    assert.equal(loadConfig([{ name: "environment", values: configFromEnv({ LOSTWRITE_GO_PROBES: "false" }).values }])["go-probes"], false);
  });

  it("receives OTLP/gRPC on 127.0.0.1:4317 unless moved or turned off", () => {
    assert.equal(loadConfig([])["otlp-grpc-listen"], "127.0.0.1:4317");
    assert.equal(loadConfig([{ name: "flag", values: { "otlp-grpc-listen": "0.0.0.0:14317" } }])["otlp-grpc-listen"], "0.0.0.0:14317");
    const off = loadConfig([{ name: "environment", values: configFromEnv({ LOSTWRITE_OTLP_GRPC_LISTEN: "off" }).values }]);
    assert.equal(off["otlp-grpc-listen"], "off");
  });

  it("rejects unknown keys, naming the source, the key and the value", () => {
    assert.throws(() => loadConfig([{ name: 'config file "x.yaml"', values: { "target-pids": [1] } }]), (err: Error) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /config file "x.yaml": unknown key "target-pids"=\[1\]/);
      return true;
    });
    assert.throws(() => configFromEnv({ LOSTWRITE_TARGETS: "1" }), /unknown variable LOSTWRITE_TARGETS="1"/);
  });

  it("otlp-forwarders: selectors from flags, env (comma-separated) or the file; a bad one names the key and the value", () => {
    const config = loadConfig([{ name: "environment", values: { "otlp-forwarders": "exe:/usr/bin/otelcol,pod:observability/otel-agent-*" } }]);
    assert.deepEqual(config["otlp-forwarders"], ["exe:/usr/bin/otelcol", "pod:observability/otel-agent-*"]);
    assert.throws(() => loadConfig([{ name: "flags", values: { "otlp-forwarders": ["otelcol"] } }]), (err: Error) => {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /flags: key "otlp-forwarders" value \["otelcol"\]: "otelcol": expected exe:\/PATH or pod:NAMESPACE\/NAME/);
      return true;
    });
  });

  it("ignores, and returns for a warning, the variables service links inject for Services named lostwrite…", () => {
    // What the kubelet sets for a Service "lostwrite" (ClusterIP 10.96.12.34,
    // ports "metrics" 9470/TCP and "otlp-http" 4318/TCP), one
    // "lostwrite-metrics" (IPv6 ClusterIP, one unnamed UDP port; the URL in
    // the bracketed form of current kubelets and the bare form of old ones)
    // and one "lostwrite-otlp-v2" with an SCTP port.
    const injected = {
      LOSTWRITE_SERVICE_HOST: "10.96.12.34",
      LOSTWRITE_SERVICE_PORT: "9470",
      LOSTWRITE_SERVICE_PORT_METRICS: "9470",
      LOSTWRITE_SERVICE_PORT_OTLP_HTTP: "4318",
      LOSTWRITE_PORT: "tcp://10.96.12.34:9470",
      LOSTWRITE_PORT_9470_TCP: "tcp://10.96.12.34:9470",
      LOSTWRITE_PORT_9470_TCP_PROTO: "tcp",
      LOSTWRITE_PORT_9470_TCP_PORT: "9470",
      LOSTWRITE_PORT_9470_TCP_ADDR: "10.96.12.34",
      LOSTWRITE_PORT_4318_TCP: "tcp://10.96.12.34:4318",
      LOSTWRITE_METRICS_SERVICE_HOST: "fd00::12",
      LOSTWRITE_METRICS_SERVICE_PORT: "9470",
      LOSTWRITE_METRICS_PORT: "udp://[fd00::12]:9470",
      LOSTWRITE_METRICS_PORT_9470_UDP: "udp://fd00::12:9470",
      LOSTWRITE_METRICS_PORT_9470_UDP_PROTO: "udp",
      LOSTWRITE_METRICS_PORT_9470_UDP_PORT: "9470",
      LOSTWRITE_METRICS_PORT_9470_UDP_ADDR: "fd00::12",
      LOSTWRITE_OTLP_V2_PORT_4318_SCTP_PROTO: "sctp",
    };
    const env = configFromEnv({ ...injected, LOSTWRITE_LISTEN: "0.0.0.0:9470", KUBERNETES_SERVICE_HOST: "10.96.0.1" });
    assert.deepEqual(env.values, { listen: "0.0.0.0:9470" });
    assert.deepEqual(env.serviceLinks, Object.keys(injected).sort());
    assert.deepEqual(configFromEnv({ LOSTWRITE_LISTEN: "0.0.0.0:9470" }).serviceLinks, []);
  });

  it("still rejects unknown variables that only look like service links", () => {
    const cases: Record<string, string> = {
      // Right name, wrong value: not what the kubelet writes.
      LOSTWRITE_SERVICE_HOST: "lostwrite.example",
      LOSTWRITE_SERVICE_PORT: "http",
      LOSTWRITE_PORT: "9470",
      LOSTWRITE_PORT_9470_TCP: "tcp://10.96.12.34:4318",
      LOSTWRITE_PORT_9470_TCP_PROTO: "udp",
      LOSTWRITE_PORT_9470_TCP_PORT: "9471",
      LOSTWRITE_PORT_9470_TCP_ADDR: "tcp://10.96.12.34:9470",
      // Names the kubelet never builds.
      LOSTWRITE_PORT_9470_HTTP: "tcp://10.96.12.34:9470",
      LOSTWRITE_SERVICE_ADDR: "10.96.12.34",
      LOSTWRITE__SERVICE_HOST: "10.96.12.34",
      LOSTWRITE_OTLP_PORT_NUMBER: "4318",
      LOSTWRITE_LISTEN_ADDR: "0.0.0.0:9470",
    };
    for (const [name, value] of Object.entries(cases)) {
      assert.equal(isServiceLinkVariable(name, value), false, `${name}=${value}`);
      assert.throws(() => configFromEnv({ [name]: value }), new RegExp(`unknown variable ${name}="${value.replace(/[.[\]]/g, "\\$&")}"`));
    }
  });

  it("the CLI logs the ignored service-link variables once and still fails on other unknown ones", () => {
    const cli = (env: Record<string, string>) => {
      const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("LOSTWRITE_")));
      return spawnSync(process.execPath, [repo("agent/bin/lostwrite.js"), "probe", "--target-pid", String(process.pid)], {
        env: { ...clean, ...env },
        encoding: "utf8",
      });
    };
    const linked = cli({ LOSTWRITE_SERVICE_HOST: "10.96.12.34", LOSTWRITE_PORT_9470_TCP_PORT: "9470" });
    assert.equal(linked.status, 0, linked.stderr);
    const warnings = linked.stderr.split("\n").filter(Boolean).map((l) => JSON.parse(l) as { level: string; msg: string; variables: string[] });
    assert.equal(warnings.length, 1, linked.stderr);
    assert.equal(warnings[0]!.level, "warn");
    assert.match(warnings[0]!.msg, /service links/);
    assert.deepEqual(warnings[0]!.variables, ["LOSTWRITE_PORT_9470_TCP_PORT", "LOSTWRITE_SERVICE_HOST"]);
    assert.match(linked.stdout, /^\/\/ Rendered by lostwrite/);
    const unknown = cli({ LOSTWRITE_SERVICE_HOST: "10.96.12.34", LOSTWRITE_TARGETS: "1" });
    assert.equal(unknown.status, 2);
    assert.match(unknown.stderr, /^lostwrite: environment: unknown variable LOSTWRITE_TARGETS="1"$/m);
  });

  it("no config key's variable can be mistaken for a service link", () => {
    for (const key of CONFIG_KEYS) {
      const name = envName(key);
      for (const value of ["10.0.0.1", "9470", "tcp://10.0.0.1:9470", "tcp"]) {
        assert.equal(isServiceLinkVariable(name, value), false, `${name}=${value}`);
      }
    }
  });

  it("says which key and value are wrong", () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ "target-pid": ["abc"] }, /key "target-pid" value \["abc"\]/],
      [{ apiserver: ["kubernetes.default:443"] }, /key "apiserver" value \["kubernetes.default:443"\]: expected IP:PORT/],
      [{ "target-comm": "([" }, /key "target-comm" value "\(\[": not a valid regular expression/],
      [{ "correlation-window": "soon" }, /key "correlation-window" value "soon"/],
      [{ "probe-variant": "kprobes" }, /key "probe-variant" value "kprobes"/],
      [{ listen: "9470" }, /key "listen" value "9470": expected ADDR:PORT/],
      [{ "otlp-grpc-listen": "4317" }, /key "otlp-grpc-listen" value "4317"/],
    ];
    for (const [values, message] of cases) assert.throws(() => loadConfig([{ name: "flag", values }]), message);
  });

  it("reports a config file that is not YAML or not a mapping", () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-config-"));
    writeFileSync(path.join(dir, "bad.yaml"), "listen: [unclosed");
    writeFileSync(path.join(dir, "list.yaml"), "- a\n- b\n");
    assert.throws(() => configFromFile(path.join(dir, "bad.yaml")), /bad.yaml": not YAML/);
    assert.throws(() => configFromFile(path.join(dir, "list.yaml")), /expected a mapping of keys/);
    assert.throws(() => configFromFile(path.join(dir, "missing.yaml")), /missing.yaml"/);
  });

  it("ships a config file that lists every key with its default", () => {
    const shipped = configFromFile(repo("deploy/agent.yaml"));
    const keys = Object.keys(configSchema.shape).filter((k) => !["target-comm", "target-cmdline", "kubeconfig", "otlp-forward", "record", "node-name"].includes(k));
    for (const key of keys) assert.ok(key in shipped, `deploy/agent.yaml lacks "${key}"`);
    assert.deepEqual(loadConfig([{ name: "file", values: shipped }]), loadConfig([]));
  });

  it("accepts the arguments the DaemonSet passes", () => {
    const daemonset = parseYaml(readFileSync(repo("deploy/base/daemonset.yaml"), "utf8")) as {
      spec: { template: { spec: { containers: { args: string[] }[] } } };
    };
    const args = daemonset.spec.template.spec.containers[0]!.args.filter((a) => a.startsWith("--"));
    const flags: Record<string, unknown> = {};
    for (const arg of args) {
      const [key, value] = arg.slice(2).split("=") as [string, string?];
      flags[key] = value === undefined ? true : value.replace("$(NODE_NAME)", "node-1");
    }
    const config = loadConfig([{ name: "flag", values: flags }]);
    assert.equal(config.kubernetes, true);
    assert.equal(config["node-name"], "node-1");
  });
});
