// `lostwrite doctor --binary PATH`: one line saying whether an operator
// binary is covered, and why not; exit code 0 only when it is.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { PassThrough } from "node:stream";
import { after, describe, it } from "node:test";
import { runBinaryCoverage } from "../../src/binaryCoverage.ts";
import { HTTP2_FUNCTIONS, HTTP2_SYMBOLS } from "../../src/sources/goBinary/http2Families.ts";
import { syntheticGoElf, type SyntheticGoSpec } from "./sources/goBinary/syntheticGoElf.ts";

const functions = [{ name: "main.main", at: 0x40 }, ...HTTP2_FUNCTIONS.map((fn, i) => ({ name: HTTP2_SYMBOLS["x/net"][fn], at: 0x100 + i * 0x80 }))];
const modules = (xNet: string): string[] => ["path\texample.com/manager", "mod\texample.com/manager\t(devel)\t", `dep\tgolang.org/x/net\t${xNet}\th1:abc=`];

void describe("doctor --binary", { timeout: 10_000 }, () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-coverage-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const run = async (name: string, spec: SyntheticGoSpec | string): Promise<{ code: number; out: string }> => {
    const file = path.join(dir, name);
    writeFileSync(file, typeof spec === "string" ? spec : syntheticGoElf(spec));
    const out = new PassThrough();
    let text = "";
    out.on("data", (chunk: Buffer) => (text += chunk.toString()));
    const code = await runBinaryCoverage(file, out);
    return { code, out: text };
  };

  it("says a binary of verified versions is covered, by which families, where the uprobes go", async () => {
    const { code, out } = await run("manager", { magic: "go1.16", goVersion: "go1.19.13", modules: modules("v0.7.0"), functions });
    assert.equal(code, 0);
    assert.equal(out, `covered: ${dir}/manager (go1.19.13, golang.org/x/net v0.7.0): requests followed (HTTP/2 client families: x/net, layout from the verified table), uprobes at stack check branch\n`);
  });

  it("names the Go and x/net versions of a binary whose layout is not verified", async () => {
    const { code, out } = await run("newer", { magic: "go1.16", goVersion: "go1.19.13", modules: modules("v0.99.0"), functions });
    assert.equal(code, 1);
    assert.equal(
      out,
      `not covered (socket path only, until its versions are verified): ${dir}/newer: its x/net HTTP/2 client, built with Go 1.19 and golang.org/x/net v0.99.0, is of no verified layout (verified: Go 1.19–1.27 with x/net v0.7.0–v0.63.0)\n`,
    );
  });

  it("says why anything else is not covered", async () => {
    const { code, out } = await run("script.sh", "#!/bin/sh\n");
    assert.equal(code, 1);
    assert.match(out, /^not covered \(socket path only\): .*script\.sh: not an ELF file/);
  });
});
