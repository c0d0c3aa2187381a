import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseApiPath } from "../../src/apiPath.ts";

describe("API paths", { timeout: 10_000 }, () => {
  it("names the object of namespaced and cluster-scoped paths, core and grouped", () => {
    assert.deepEqual(parseApiPath("/apis/demo.lostwrite.dev/v1/namespaces/default/widgets/w1/status"), {
      namespace: "default", resource: "widgets", name: "w1", subresource: "status",
    });
    assert.deepEqual(parseApiPath("/api/v1/namespaces/kube-system/pods/p-1"), { namespace: "kube-system", resource: "pods", name: "p-1", subresource: null });
    assert.deepEqual(parseApiPath("/api/v1/nodes/n1/status"), { namespace: null, resource: "nodes", name: "n1", subresource: "status" });
    assert.deepEqual(parseApiPath("/api/v1/namespaces/ops"), { namespace: null, resource: "namespaces", name: "ops", subresource: null });
    assert.deepEqual(parseApiPath("/apis/apps/v1/namespaces/ops/deployments?watch=1"), { namespace: "ops", resource: "deployments", name: null, subresource: null });
    assert.deepEqual(parseApiPath("/api/v1/namespaces/a%20b/pods/x"), { namespace: "a b", resource: "pods", name: "x", subresource: null });
  });

  it("names nothing for paths that are not an object's", () => {
    for (const path of ["/version", "/healthz", "/api", "/api/v1", "/apis/apps", "/apis/apps/v1", "/api/v1/namespaces/a/pods/b/status/extra", "widgets"]) {
      assert.equal(parseApiPath(path), null, path);
    }
  });
});
