// /metrics on a real HTTP server: a plain scrape gets the classic text format
// exactly as the registry renders it, without exemplars; a scraper that asks
// for OpenMetrics (as Prometheus does) gets it, with the trace of the latest
// loss on each loss series as its exemplar.
import assert from "node:assert/strict";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { execa } from "execa";
import { Registry } from "prom-client";
import { startHttpServer, negotiateMetricsFormat } from "../../../src/sinks/httpServer.ts";
import { recordLoss } from "../../../src/sinks/lossMetrics.ts";
import { removePodSeries } from "../../../src/telemetry/workloadSeries.ts";
import { AgentMetrics, EXEMPLAR_LABELS_MAX_CHARS, EXEMPLAR_METRICS, traceExemplar } from "../../../src/telemetry/metrics.ts";
import { MONITORING_GENERATIONS, skipUnlessCI } from "../../e2e/support/tools.ts";
import { sampleEvent } from "../sinks/sampleEvent.ts";

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN = "00f067aa0ba902b7";
// What Prometheus 2.x sends on every scrape.
const PROMETHEUS_ACCEPT =
  "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";


describe("format negotiation on the Accept header", () => {
  const cases: [string | undefined, "openmetrics" | "text"][] = [
    [undefined, "text"],
    ["", "text"],
    ["*/*", "text"],
    ["text/plain; version=0.0.4", "text"],
    ["application/openmetrics-text; version=1.0.0", "openmetrics"],
    ["application/openmetrics-text", "openmetrics"],
    ["Application/OpenMetrics-Text; Version=\"1.0.0\"", "openmetrics"],
    [PROMETHEUS_ACCEPT, "openmetrics"],
    // Preference is by q, then order.
    ["text/plain;q=0.9,application/openmetrics-text;version=1.0.0", "openmetrics"],
    ["application/openmetrics-text;version=1.0.0;q=0.5,text/plain", "text"],
    ["application/openmetrics-text;version=1.0.0;q=0,text/plain;q=0.1", "text"],
    // A version we do not serve is not answered with another one.
    ["application/openmetrics-text;version=0.0.1", "text"],
    ["application/openmetrics-text;version=2.0.0,application/openmetrics-text;version=1.0.0;q=0.5", "openmetrics"],
    ["application/json", "text"],
  ];
  for (const [accept, format] of cases) {
    it(`${JSON.stringify(accept)} → ${format}`, () => assert.equal(negotiateMetricsFormat(accept), format));
  }
});

describe("trace exemplar labels", () => {
  it("are the trace and span ids, lower-cased, inside the OpenMetrics limit", () => {
    const labels = traceExemplar(TRACE.toUpperCase(), SPAN.toUpperCase());
    assert.deepEqual(labels, { trace_id: TRACE, span_id: SPAN });
    const size = Object.entries(labels ?? {}).reduce((n, [k, v]) => n + k.length + v.length, 0);
    assert.ok(size <= EXEMPLAR_LABELS_MAX_CHARS, `${size} characters`);
  });
  it("need a valid trace id; an invalid span id is left out", () => {
    assert.equal(traceExemplar(null, SPAN), null);
    assert.equal(traceExemplar("t", SPAN), null);
    assert.equal(traceExemplar("0".repeat(32), SPAN), null);
    assert.equal(traceExemplar(`${TRACE}00`, SPAN), null);
    assert.deepEqual(traceExemplar(TRACE, null), { trace_id: TRACE });
    assert.deepEqual(traceExemplar(TRACE, "s"), { trace_id: TRACE });
    assert.deepEqual(traceExemplar(TRACE, "0".repeat(16)), { trace_id: TRACE });
  });
});

describe("/metrics", () => {
  let metrics: AgentMetrics;
  let server: Server;
  let url: string;

  before(async () => {
    metrics = new AgentMetrics();
    // A joined loss (trace and span), a second loss on the same series with a newer trace, one without a trace.
    recordLoss(metrics, sampleEvent({ trace_id: "1".repeat(32), span_id: "2".repeat(16) }), "widget");
    recordLoss(metrics, sampleEvent(), "widget");
    recordLoss(metrics, sampleEvent({ pod: "untraced", correlation: "none", trace_id: null, span_id: null }), "widget");
    metrics.detectionLatency.observe(0.02);
    metrics.writes.inc({ namespace: "ops", pod: 'a "quoted"\\pod', container: "manager", process: "manager" });
    server = await startHttpServer({ host: "127.0.0.1", port: 0, metrics, ready: () => ({ ok: true, reason: "ready" }) });
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`;
  });

  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  async function scrape(accept?: string): Promise<{ type: string | null; vary: string | null; body: string }> {
    const response = await fetch(url, { headers: accept === undefined ? {} : { accept } });
    assert.equal(response.status, 200);
    return { type: response.headers.get("content-type"), vary: response.headers.get("vary"), body: await response.text() };
  }

  it("a plain scrape gets the classic text format exactly as the registry renders it, with no exemplar", async () => {
    for (const accept of [undefined, "text/plain; version=0.0.4", "*/*"]) {
      const { type, vary, body } = await scrape(accept);
      assert.equal(type, Registry.PROMETHEUS_CONTENT_TYPE);
      assert.equal(vary, "Accept");
      assert.equal(body, await metrics.text());
      assert.ok(!body.includes("trace_id"), "no exemplar in the classic format");
      assert.ok(!body.includes("# EOF"));
    }
  });

  it("an OpenMetrics scrape carries the latest joined loss's trace as the series' exemplar", async () => {
    const { type, vary, body } = await scrape("application/openmetrics-text; version=1.0.0");
    assert.equal(type, Registry.OPENMETRICS_CONTENT_TYPE);
    assert.equal(vary, "Accept");
    assert.ok(body.endsWith("\n# EOF\n"), "ends with # EOF");
    assert.ok(!body.includes("\n\n"), "no blank lines");
    assert.match(body, /^# HELP lostwrite_status_write_lost Writes to the apiserver/m);
    assert.match(body, /^# TYPE lostwrite_status_write_lost counter$/m);
    const traced = body.split("\n").find((line) => line.startsWith('lostwrite_status_write_lost_total{namespace="ops",pod="widget-operator-7d9"'));
    assert.ok(traced, body);
    const match = /^(\S+) 2 # \{trace_id="([0-9a-f]{32})",span_id="([0-9a-f]{16})"\} 1 (\d+\.\d{3})$/.exec(traced);
    assert.ok(match, traced);
    assert.equal(match[2], TRACE, "the latest loss's trace");
    assert.equal(match[3], SPAN);
    assert.ok(Math.abs(Number(match[4]) - Date.now() / 1000) < 60, "the exemplar's timestamp is the time it was counted");
    const untraced = body.split("\n").find((line) => line.includes('pod="untraced"'));
    assert.match(untraced ?? "", /^lostwrite_status_write_lost_total\{[^}]*\} 1$/, "no exemplar without a trace");
    const withExemplar = body.split("\n").filter((line) => line.includes(" # {"));
    assert.ok(withExemplar.length > 0);
    for (const line of withExemplar) {
      assert.ok(EXEMPLAR_METRICS.some((name) => line.startsWith(`${name}{`)), `only the documented metrics carry exemplars: ${line}`);
    }
  });

  it("the OpenMetrics exposition has the classic one's series and values", async () => {
    const classic = await metrics.text();
    const open = (await scrape(PROMETHEUS_ACCEPT)).body;
    const samples = (text: string) =>
      text
        .split("\n")
        .filter((line) => line !== "" && !line.startsWith("#"))
        .map((line) => line.replace(/ # \{.*$/, ""))
        .sort();
    assert.deepEqual(samples(open), samples(classic));
    assert.ok(open.includes('pod="a \\"quoted\\"\\\\pod"'), "label values escaped");
    assert.match(open, /^# TYPE lostwrite_detection_latency_seconds histogram$/m);
    assert.match(open, /^lostwrite_detection_latency_seconds_bucket\{le="\+Inf"\} 1$/m);
    // Every counter family is named without _total, every counter sample with it.
    for (const [, family] of open.matchAll(/^# TYPE (\S+) counter$/gm)) {
      assert.ok(!family!.endsWith("_total"), family);
    }
  });

  it("a pod that went away takes its exemplar with it", async () => {
    const own = new AgentMetrics();
    recordLoss(own, sampleEvent(), "widget");
    await removePodSeries(own, "ops", "widget-operator-7d9");
    recordLoss(own, sampleEvent({ trace_id: null, span_id: null, correlation: "none" }), "widget");
    const text = await own.openMetrics();
    assert.match(text, /^lostwrite_status_write_lost_total\{[^}]*pod="widget-operator-7d9"[^}]*\} 1$/m);
    assert.ok(!text.includes("trace_id"), text);
  });

  for (const { name, promtool } of MONITORING_GENERATIONS) {
    it(`promtool check metrics is clean on the classic output with exemplars recorded (${name})`, { skip: skipUnlessCI(promtool) }, async () => {
      const { body } = await scrape();
      const result = await execa(promtool.path ?? assert.fail(promtool.reason), ["check", "metrics"], { input: body, reject: false });
      assert.equal(result.exitCode, 0, `promtool check metrics:\n${result.stdout}${result.stderr}`);
      assert.equal(result.stdout + result.stderr, "", "promtool check metrics printed lint findings");
    });
  }
});
