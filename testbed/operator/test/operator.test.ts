// The sample operator in each mode against the stand-in apiserver, as real
// processes: what the Widget's status becomes, and the spans it exports over
// OTLP/HTTP (JSON encoding here, chosen through the standard env variable).
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, it } from "node:test";
import { execa, type ResultPromise } from "execa";
import { startTestApiserver, type TestServer } from "../../apiserver/test/support.ts";

interface OtlpValue { stringValue?: string; intValue?: string | number; boolValue?: boolean }
interface OtlpSpan {
  traceId: string; spanId: string; parentSpanId?: string; name: string; kind: number;
  attributes: { key: string; value: OtlpValue }[]; status?: { code?: number };
}
interface Span { name: string; kind: number; traceId: string; spanId: string; parentSpanId: string; attrs: Record<string, unknown>; error: boolean; resource: Record<string, unknown> }

const spans: Span[] = [];
let otlp: http.Server;
let server: TestServer;
const operators: ResultPromise[] = [];
const logs: Record<string, string> = {};

function flatten(attributes: { key: string; value: OtlpValue }[] = []): Record<string, unknown> {
  return Object.fromEntries(attributes.map(({ key, value }) => [key, value.stringValue ?? (value.intValue === undefined ? value.boolValue : Number(value.intValue))]));
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function until<T>(what: string, probe: () => T | undefined, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

const MODES = ["correct", "swallow", "update-main"] as const;
const widgetKey = "demo.lostwrite.dev/v1/widgets";

before(async () => {
  otlp = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = JSON.parse(Buffer.concat(chunks).toString()) as { resourceSpans: { resource: { attributes: [] }; scopeSpans: { spans: OtlpSpan[] }[] }[] };
      for (const rs of body.resourceSpans) {
        const resource = flatten(rs.resource.attributes);
        for (const ss of rs.scopeSpans) {
          for (const s of ss.spans) {
            spans.push({ name: s.name, kind: s.kind, traceId: s.traceId, spanId: s.spanId, parentSpanId: s.parentSpanId ?? "", attrs: flatten(s.attributes), error: s.status?.code === 2, resource });
          }
        }
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => otlp.listen(0, "127.0.0.1", resolve));
  server = await startTestApiserver();
  // Each mode gets its namespace; its first status write dies with a RST.
  for (const mode of MODES) {
    server.control.addRule({ id: `rst-${mode}`, path: `*/namespaces/${mode}/widgets/*`, method: mode === "update-main" ? "PUT" : "PATCH", action: "reset" });
    server.store.commit(widgetKey, { apiVersion: "demo.lostwrite.dev/v1", kind: "Widget", metadata: { name: "w1", namespace: mode, generation: 1 }, spec: { size: 1 } });
  }
  const endpoint = `http://127.0.0.1:${(otlp.address() as AddressInfo).port}`;
  for (const mode of MODES) {
    const child = execa(process.execPath, ["testbed/operator/main.ts", "--kubeconfig", server.kubeconfigPath, "--mode", mode, "--namespace", mode, "--workers", "2", "--backoff-base-ms", "50"], {
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: "http/json", OTEL_SERVICE_NAME: `widget-operator-${mode}` },
      reject: false, all: true,
    });
    logs[mode] = "";
    child.all.on("data", (chunk: Buffer) => { logs[mode] += chunk.toString(); });
    operators.push(child);
  }
  await until("all operators to start", () => MODES.every((mode) => logs[mode]?.includes('"msg":"started"')), 60_000);
});

after(async () => {
  if (process.env.TESTBED_DEBUG) console.error(logs, spans.length, server.faultLog());
  for (const child of operators) child.kill("SIGTERM");
  await Promise.all(operators);
  await server.close();
  otlp.close();
});

function statusOf(mode: string): { observedGeneration?: number; phase?: string } | undefined {
  return server.store.get(widgetKey, mode, "w1")?.status as { observedGeneration?: number; phase?: string } | undefined;
}

function spansOf(mode: string): Span[] {
  return spans.filter((span) => span.resource["service.name"] === `widget-operator-${mode}`);
}

void it("correct: the reset status write is retried and the status lands; spans show the failure", async () => {
  const status = await until("correct-mode status", () => (statusOf("correct")?.observedGeneration === 1 ? statusOf("correct") : undefined));
  assert.equal(status.phase, "Ready");
  const reconciles = await until("two reconcile spans", () => { const r = spansOf("correct").filter((s) => s.name === "reconcile Widget"); return r.length >= 2 ? r : undefined; });
  const failed = reconciles.find((s) => s.error);
  assert.ok(failed, "the failed reconcile span has status ERROR");
  assert.deepEqual({ ...failed.attrs }, { controller: "widget", controllerKind: "Widget", namespace: "correct", name: "w1", generation: 1 });
  const client = await until("client span of the failed reconcile", () => spansOf("correct").find((s) => s.parentSpanId === failed.spanId));
  assert.equal(client.traceId, failed.traceId);
  assert.equal(client.kind, 3, "SPAN_KIND_CLIENT");
  assert.equal(client.error, true);
  assert.equal(client.attrs["http.request.method"], "PATCH");
  assert.equal(client.attrs["url.path"], "/apis/demo.lostwrite.dev/v1/namespaces/correct/widgets/w1/status");
  assert.equal(client.attrs["url.full"], `${server.url}/apis/demo.lostwrite.dev/v1/namespaces/correct/widgets/w1/status`);
  assert.equal(client.attrs["server.address"], "127.0.0.1");
  assert.equal(client.attrs["server.port"], server.port);
  assert.equal(typeof client.attrs["error.type"], "string");
  assert.equal(client.resource["process.pid"], operators[0]?.pid);
  const succeeded = await until("the successful client span", () => spansOf("correct").find((s) => s.kind === 3 && s.attrs["http.response.status_code"] === 200));
  assert.equal(succeeded.error, false);
});

void it("swallow: the status is lost while the reconcile reports success", async () => {
  await until("the swallow log line", () => logs.swallow?.includes("status write failed, ignoring"));
  await sleep(700);
  assert.equal(statusOf("swallow"), undefined, "nothing retried the write");
  const reconcile = await until("reconcile span", () => spansOf("swallow").find((s) => s.name === "reconcile Widget"));
  assert.equal(reconcile.error, false, "the operator's own span says OK");
  const client = await until("client span", () => spansOf("swallow").find((s) => s.parentSpanId === reconcile.spanId));
  assert.equal(client.error, true, "the HTTP client span still records the failure");
  assert.equal(spansOf("swallow").filter((s) => s.name === "reconcile Widget").length, 1);
});

void it("update-main: status written through the main resource is silently dropped", async () => {
  const ok = await until("a 200 answer to the PUT", () => spansOf("update-main").find((s) => s.kind === 3 && s.attrs["http.response.status_code"] === 200));
  assert.equal(ok.attrs["http.request.method"], "PUT");
  assert.equal(ok.attrs["url.path"], "/apis/demo.lostwrite.dev/v1/namespaces/update-main/widgets/w1");
  assert.equal(statusOf("update-main"), undefined, "the apiserver ignored status on the main resource");
  assert.equal(server.faultLog().filter((r) => r.rule === "rst-update-main").length, 1);
});
