// A loss event of the public schema (model.ts LossEvent), for sink tests to vary.
import type { LossEvent } from "../../../src/model.ts";

export function sampleEvent(overrides: Partial<LossEvent> = {}): LossEvent {
  return {
    kind: "status_write_lost",
    time: "2026-12-02T15:04:05.123456Z",
    node: "n1",
    namespace: "ops",
    pod: "widget-operator-7d9",
    container: "manager",
    process: "manager",
    pid: 4242,
    tid: 4250,
    cause: "write_failed",
    syscall: "write",
    errno: "EPIPE",
    ret: -32,
    bytes: 1834,
    apiserver: "10.96.0.1:443",
    noticed: "no",
    correlation: "span",
    trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
    span_id: "00f067aa0ba902b7",
    reconcile: { controller: "widget", namespace: "default", name: "w1", kind: "Widget" },
    request: { method: "PATCH", path: "/apis/example.com/v1/namespaces/default/widgets/w1/status", status_code: null },
    unanswered_bytes: null,
    unanswered_for_ms: null,
    retransmits: null,
    ...overrides,
  };
}
