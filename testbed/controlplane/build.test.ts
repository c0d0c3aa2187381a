import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { kubeApiserverGoMod, stagingModules } from "./build.ts";

// An excerpt of k8s.io/kubernetes v1.37.2's go.mod: staging modules at
// v0.0.0 (in a block and on a line of their own), a k8s.io module at a
// pseudo-version, which is a real dependency and is left alone.
const GO_MOD = `module k8s.io/kubernetes

go 1.26.0

require (
	github.com/blang/semver/v4 v4.0.0
	k8s.io/api v0.0.0
	k8s.io/apiserver v0.0.0 // indirect
	k8s.io/kube-openapi v0.0.0-20260721132016-d427ff9ee9ad
	k8s.io/utils v0.0.0-20260626114624-be93311217bd
)

require k8s.io/streaming v0.0.0

replace (
	k8s.io/api => ./staging/src/k8s.io/api
)
`;

describe("the kube-apiserver build module", () => {
  it("lists the staging modules, not the pseudo-versioned ones", () => {
    assert.deepEqual(stagingModules(GO_MOD), ["k8s.io/api", "k8s.io/apiserver", "k8s.io/streaming"]);
  });

  it("replaces each at the release's v0.X.Y and keeps the go line", () => {
    const goMod = kubeApiserverGoMod("v1.37.2", GO_MOD);
    assert.match(goMod, /^go 1\.26\.0$/m);
    assert.match(goMod, /^require k8s\.io\/kubernetes v1\.37\.2$/m);
    assert.deepEqual(goMod.split("\n").filter((l) => l.startsWith("replace")), [
      "replace k8s.io/api => k8s.io/api v0.37.2",
      "replace k8s.io/apiserver => k8s.io/apiserver v0.37.2",
      "replace k8s.io/streaming => k8s.io/streaming v0.37.2",
    ]);
  });

  it("refuses a go.mod without staging modules", () => {
    assert.throws(() => kubeApiserverGoMod("v1.37.2", "module k8s.io/kubernetes\n"), /no staging module/);
  });
});
