// The fixture bodies (agent/test/fixtures/otlp, written by the OpenTelemetry
// serializers) decode to the golden spans, whichever encoding they came in.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { gunzipSync } from "node:zlib";
import { type IndexedSpan, toIndexedSpans } from "../../../../src/sources/spans/indexedSpans.ts";
import { decodeJsonTraceRequest } from "../../../../src/sources/spans/otlpJson.ts";
import { decodeProtobufTraceRequest } from "../../../../src/sources/spans/otlpProtobuf.ts";
import { repoPath } from "../../../repoPath.ts";

const fixture = (name: string): Buffer => readFileSync(repoPath("agent/test/fixtures/otlp", name));

/** JSON has no bigint: times become decimal strings. */
function normalise(spans: IndexedSpan[]): unknown {
  return JSON.parse(JSON.stringify(spans, (_key, value: unknown) => (typeof value === "bigint" ? value.toString() : value)));
}

const golden: unknown = JSON.parse(fixture("reconcile-status-patch.spans.json").toString());

void test("protobuf fixture decodes to the golden spans", () => {
  const spans = toIndexedSpans(decodeProtobufTraceRequest(fixture("reconcile-status-patch.pb")), "10.244.1.7");
  assert.deepEqual(normalise(spans), golden);
});

void test("gzip protobuf fixture decodes to the golden spans", () => {
  const body = gunzipSync(fixture("reconcile-status-patch.pb.gz"));
  assert.deepEqual(normalise(toIndexedSpans(decodeProtobufTraceRequest(body), "10.244.1.7")), golden);
});

void test("JSON fixture decodes to the golden spans", () => {
  const spans = toIndexedSpans(decodeJsonTraceRequest(fixture("reconcile-status-patch.json")), "10.244.1.7");
  assert.deepEqual(normalise(spans), golden);
});
