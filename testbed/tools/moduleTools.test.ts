import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MODULE_TOOLS, versionFlags } from "./moduleTools.ts";

describe("module tools: each project's version variables", () => {
  it("Prometheus and Alertmanager set github.com/prometheus/common/version", () => {
    const v = "github.com/prometheus/common/version";
    assert.equal(
      versionFlags(MODULE_TOOLS.prometheus),
      `-ldflags=-s -w -X ${v}.Version=3.16.0 -X ${v}.Revision=github.com/prometheus/prometheus@v0.316.0 -X ${v}.Branch=release`,
    );
    assert.match(versionFlags(MODULE_TOOLS.amtool), new RegExp(`-X ${v}.Version=0\\.35\\.0 `));
  });

  it("Jaeger sets its internal/version to the v2 release tag", () => {
    const v = "github.com/jaegertracing/jaeger/internal/version";
    assert.equal(
      versionFlags(MODULE_TOOLS.jaeger),
      `-ldflags=-s -w -X ${v}.latestVersion=v2.12.0 -X ${v}.commitSHA=github.com/jaegertracing/jaeger@v1.75.0`,
    );
  });
});
