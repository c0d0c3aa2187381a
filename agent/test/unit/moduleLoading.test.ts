// The agent's resident memory is mostly the code it loads: what a feature
// needs is loaded when that feature is turned on, not by importing the
// agent. Checked in a fresh Node process, which imports the agent's whole
// module graph (pipeline.ts) without starting it and reports what it loaded.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import path from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

const pipeline = pathToFileURL(path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../src/pipeline.ts")).href;

const REPORT_LOADED = `
import { registerHooks } from "node:module";
const loaded = [];
registerHooks({ load(url, context, nextLoad) { loaded.push(url); return nextLoad(url, context); } });
await import(${JSON.stringify(pipeline)});
process.stdout.write(JSON.stringify({ builtins: process.moduleLoadList, loaded }));
`;

describe("what importing the agent loads", { timeout: 60_000 }, () => {
  const { builtins, loaded } = JSON.parse(execFileSync(process.execPath, ["--input-type=module", "-e", REPORT_LOADED], { encoding: "utf8" })) as {
    builtins: string[];
    loaded: string[];
  };

  it("loads the agent (the check sees its modules)", () => {
    assert.ok(loaded.some((url) => url.endsWith("/agent/src/pipeline.ts")), "pipeline.ts itself");
    assert.ok(loaded.some((url) => url.includes("/node_modules/prom-client/")), "prom-client, which every agent uses");
  });

  it("does not load Node's bundled undici (an ES import of node:http would: its WebSocket export is a getter into undici)", () => {
    assert.deepEqual(
      builtins.filter((name) => name.includes("undici")),
      [],
    );
  });

  it("loads the Kubernetes client only with --kubernetes and the trace SDK only when exporting", () => {
    for (const pkg of ["/node_modules/@kubernetes/client-node/", "/node_modules/@opentelemetry/sdk-node/", "/node_modules/@opentelemetry/sdk-trace-base/"]) {
      assert.deepEqual(
        loaded.filter((url) => url.includes(pkg)),
        [],
        pkg,
      );
    }
  });
});
