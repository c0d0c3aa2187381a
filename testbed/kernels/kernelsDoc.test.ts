// docs/kernels.md's rendering: a kernel whose suite passed and one whose TLS
// program did not load, each a summary row and a section of its own.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { renderKernelsDoc, type KernelRun } from "./kernelsDoc.ts";

const run = (kernel: string, tlsLoaded: boolean, tlsNotStarted?: string): KernelRun => ({
  kernel,
  package: `linux-image-${kernel}`,
  release: `${kernel}.0-1-amd64`,
  exitCode: tlsLoaded ? 0 : 1,
  bootMs: 20_000,
  runMs: 190_500,
  failure: tlsLoaded ? null : "✖ TLS | program",
  results: {
    kernel: `${kernel}.0-1-amd64`,
    variant: "syscalls",
    doctor: ["ok BTF: present"],
    families: [
      { family: "socket program (syscalls)", loaded: true },
      { family: "TLS program (python's libssl)", loaded: tlsLoaded, ...(tlsNotStarted ? { notStarted: tlsNotStarted } : {}) },
      { family: "Go request uprobes (go-operator)", loaded: true },
    ],
    faults: [
      { fault: "refused connect", expected: "connect_failed ECONNREFUSED", detected: "connect_failed ECONNREFUSED" },
      { fault: "reset", expected: "connection_reset", detected: tlsLoaded ? "connection_reset" : "none" },
    ],
  },
});

describe("docs/kernels.md", { timeout: 10_000 }, () => {
  const doc = renderKernelsDoc([run("6.1", true), run("5.10", false), run("5.4", false, "the kernel lacks sock:sock_send_length")], new Date("2026-12-05T10:00:00Z"), "## Notes\n\nkept");

  it("has a summary row per kernel: variant, families, faults as expected, times", () => {
    assert.ok(doc.includes("| 6.1 | syscalls | loaded | loaded | loaded | 2/2 | 20.0 s | 190.5 s |"), doc);
    assert.ok(doc.includes("| 5.10 | syscalls | loaded | loaded | **not loaded** | 1/2 | 20.0 s | 190.5 s |"), doc);
    // A family the agent does not start on a kernel, by design, is no failure.
    assert.ok(doc.includes("| 5.4 | syscalls | loaded | loaded | not started | 1/2 | 20.0 s | 190.5 s |"), doc);
    assert.ok(doc.includes("| TLS program (python's libssl) | not started: the kernel lacks sock:sock_send_length |"), doc);
  });

  it("shows each fault expected vs detected, and what failed, with table pipes escaped", () => {
    assert.ok(doc.includes("| reset | connection_reset | none | **mismatch** |"));
    assert.ok(doc.includes("Suite failed (exit 1)."));
    assert.ok(doc.includes("✖ TLS | program"), "the failure lines are in a code block, as they were");
    assert.ok(doc.trimEnd().endsWith("kept"), "the notes close the page");
  });
});
