// Which layout the probes read a family's structs with: only one verified for
// the Go release and golang.org/x/net version that built the binary; anything
// else is refused with a reason naming those versions.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ModuleVersion } from "../../../../src/sources/goBinary/buildInfo.ts";
import { compareModuleVersions, HTTP2_LAYOUTS, layoutFor } from "../../../../src/sources/goBinary/http2Layouts.ts";

const xNet = (version: string, replacement: ModuleVersion["replacement"] = null): ModuleVersion => ({ path: "golang.org/x/net", version, replacement });
const layoutOf = (family: string) => HTTP2_LAYOUTS.find((row) => row.family === family)!.layout;

void describe("layoutFor", { timeout: 10_000 }, () => {
  it("gives net/http's bundled copy its layout from Go 1.19 to 1.26, whatever the x/net", () => {
    assert.equal(layoutFor("std", 19, null), layoutOf("std"));
    assert.equal(layoutFor("std", 26, xNet("v0.63.0")), layoutOf("std"));
    assert.match(layoutFor("std", 18, null) as string, /^its std HTTP\/2 client, built with Go 1\.18, is of no verified layout \(verified: Go 1\.19–1\.26\)$/);
  });

  it("reads Go 1.27's net/http/internal/http2 request after its Context", () => {
    const layout = layoutFor("internal", 27, xNet("v0.63.0"));
    if (typeof layout === "string") assert.fail(layout);
    assert.deepEqual([layout.requestMethod, layout.requestUrl], [16, 32]);
    assert.deepEqual([layoutOf("std").requestMethod, layoutOf("std").requestUrl], [0, 16], "an *http.Request: Method first");
    assert.match(layoutFor("internal", 28, null) as string, /built with Go 1\.28, is of no verified layout \(verified: Go 1\.27–1\.27\)/);
  });

  it("takes golang.org/x/net from v0.7.0 to v0.63.0 with Go 1.19 to 1.27, and nothing past either end", () => {
    for (const version of ["v0.7.0", "v0.30.0", "v0.44.0", "v0.63.0"]) assert.equal(layoutFor("x/net", 26, xNet(version)), layoutOf("x/net"), version);
    assert.equal(layoutFor("x/net", 27, xNet("v0.63.0")), layoutOf("x/net"), "Go 1.27 built with -tags http2legacy keeps x/net's own client");
    for (const version of ["v0.6.0", "v0.64.0", "v0.63.1-0.20261101000000-abcdef123456", "v1.0.0"]) {
      assert.equal(
        layoutFor("x/net", 26, xNet(version)),
        `its x/net HTTP/2 client, built with Go 1.26 and golang.org/x/net ${version}, is of no verified layout (verified: Go 1.19–1.27 with x/net v0.7.0–v0.63.0)`,
      );
    }
    assert.match(layoutFor("x/net", 28, xNet("v0.63.0")) as string, /built with Go 1\.28 and golang\.org\/x\/net v0\.63\.0, is of no verified layout/);
  });

  it("judges the x/net that was compiled: a replacement's version, not the required one", () => {
    assert.equal(layoutFor("x/net", 26, xNet("v0.70.0", { path: "golang.org/x/net", version: "v0.30.0" })), layoutOf("x/net"));
    assert.match(layoutFor("x/net", 26, xNet("v0.30.0", { path: "example.com/fork/net", version: "v0.99.0" })) as string, /golang\.org\/x\/net v0\.99\.0/);
  });

  it("refuses an x/net family whose version the build info does not give", () => {
    assert.match(layoutFor("x/net", 26, null) as string, /^its x\/net HTTP\/2 client, built with Go 1\.26, is of no verified layout/);
    assert.match(layoutFor("x/net", 26, xNet("(devel)")) as string, /golang\.org\/x\/net \(devel\), is of no verified layout/);
  });
});

void describe("compareModuleVersions", { timeout: 10_000 }, () => {
  it("orders by major, minor, patch, a pseudo-version before the release it precedes", () => {
    assert.equal(compareModuleVersions("v0.9.0", "v0.10.0"), -1);
    assert.equal(compareModuleVersions("v0.63.0", "v0.63.0"), 0);
    assert.equal(compareModuleVersions("v0.63.1-0.20261101000000-abcdef123456", "v0.63.1"), -1);
    assert.equal(compareModuleVersions("v0.63.1-0.20261101000000-abcdef123456", "v0.63.0"), 1);
    assert.equal(compareModuleVersions("(devel)", "v0.63.0"), null);
  });
});
