// Conformance of the apiserver stand-in with the Kubernetes behaviour
// operators rely on: status vs main resource, generation, resourceVersion,
// 409 on stale updates, watch, both HTTP versions, and real kubectl.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import http2 from "node:http2";
import { after, before, describe, it } from "node:test";
import { execa } from "execa";
import { h1, h2, startTestApiserver, widget, WIDGETS_PATH, type TestServer } from "./support.ts";

interface Obj {
  metadata: { name: string; generation: number; resourceVersion: string; uid: string };
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
}

let server: TestServer;
before(async () => { server = await startTestApiserver({ store: { historyCapacity: 50 } }); });
after(async () => { await server.close(); });

void describe("transport", () => {
  void it("answers over HTTP/2 and HTTP/1.1 on the same port (ALPN)", async () => {
    const [a, b] = await Promise.all([h2(server, "GET", "/version"), h1(server, "GET", "/version")]);
    assert.equal(a.protocol, "HTTP/2");
    assert.equal(b.protocol, "HTTP/1.1");
    for (const answer of [a, b]) {
      assert.equal(answer.status, 200);
      assert.equal((answer.body as { major: string }).major, "1");
    }
  });

  void it("serves discovery for the widgets group with the status subresource", async () => {
    const groups = (await h1(server, "GET", "/apis")).body as { groups: { name: string }[] };
    assert.ok(groups.groups.some((g) => g.name === "demo.lostwrite.dev"));
    const list = (await h2(server, "GET", "/apis/demo.lostwrite.dev/v1")).body as { resources: { name: string; verbs: string[] }[] };
    assert.deepEqual(list.resources.map((r) => r.name), ["widgets", "widgets/status"]);
    assert.ok(list.resources[0]?.verbs.includes("watch"));
  });
});

void describe("widgets", () => {
  void it("drops status on create and starts at generation 1", async () => {
    const created = await h2(server, "POST", WIDGETS_PATH, widget("create-1", { size: 1 }, { phase: "Bogus" }));
    assert.equal(created.status, 201);
    const obj = created.body as Obj;
    assert.equal(obj.metadata.generation, 1);
    assert.equal(obj.status, undefined);
    assert.match(obj.metadata.uid, /^[0-9a-f-]{36}$/);
    const again = await h2(server, "POST", WIDGETS_PATH, widget("create-1"));
    assert.equal(again.status, 409);
    assert.equal((again.body as { reason: string }).reason, "AlreadyExists");
  });

  void it("ignores status on main-resource writes and bumps generation on spec change only", async () => {
    const created = (await h2(server, "POST", WIDGETS_PATH, widget("main-1"))).body as Obj;
    // Status-only change through the main resource: silently ignored, nothing written.
    const put = await h1(server, "PUT", `${WIDGETS_PATH}/main-1`, { ...widget("main-1"), metadata: created.metadata, status: { phase: "Ready" } });
    assert.equal(put.status, 200);
    const unchanged = put.body as Obj;
    assert.equal(unchanged.status, undefined);
    assert.equal(unchanged.metadata.resourceVersion, created.metadata.resourceVersion, "a no-op write gets no new resourceVersion");
    assert.equal(unchanged.metadata.generation, 1);
    // Spec change: generation and resourceVersion move, status still ignored.
    const patched = (await h2(server, "PATCH", `${WIDGETS_PATH}/main-1`, { spec: { size: 2 }, status: { phase: "X" } }, "application/merge-patch+json")).body as Obj;
    assert.equal(patched.metadata.generation, 2);
    assert.notEqual(patched.metadata.resourceVersion, created.metadata.resourceVersion);
    assert.equal(patched.status, undefined);
    assert.deepEqual(patched.spec, { size: 2 });
  });

  void it("applies only status on /status writes, without a generation bump", async () => {
    const created = (await h2(server, "POST", WIDGETS_PATH, widget("status-1"))).body as Obj;
    const merge = await h2(server, "PATCH", `${WIDGETS_PATH}/status-1/status`, { spec: { size: 99 }, status: { phase: "Ready", observedGeneration: 1 } }, "application/merge-patch+json");
    assert.equal(merge.status, 200);
    const merged = merge.body as Obj;
    assert.deepEqual(merged.status, { phase: "Ready", observedGeneration: 1 });
    assert.deepEqual(merged.spec, { size: 1 }, "spec in a status write is ignored");
    assert.equal(merged.metadata.generation, 1);
    assert.ok(Number(merged.metadata.resourceVersion) > Number(created.metadata.resourceVersion));

    const json = await h1(server, "PATCH", `${WIDGETS_PATH}/status-1/status`, [{ op: "replace", path: "/status/phase", value: "Degraded" }], "application/json-patch+json");
    assert.equal((json.body as Obj).status?.phase, "Degraded");
    const failedTest = await h1(server, "PATCH", `${WIDGETS_PATH}/status-1/status`, [{ op: "test", path: "/status/phase", value: "Ready" }], "application/json-patch+json");
    assert.equal(failedTest.status, 422);

    const current = (await h2(server, "GET", `${WIDGETS_PATH}/status-1`)).body as Obj;
    const put = await h2(server, "PUT", `${WIDGETS_PATH}/status-1/status`, { ...current, spec: { size: 5 }, status: { phase: "Ready" } });
    assert.deepEqual((put.body as Obj).status, { phase: "Ready" });
    assert.deepEqual((put.body as Obj).spec, { size: 1 });
  });

  void it("answers 409 Conflict with a Status body to an update with a stale resourceVersion", async () => {
    const created = (await h2(server, "POST", WIDGETS_PATH, widget("conflict-1"))).body as Obj;
    await h2(server, "PATCH", `${WIDGETS_PATH}/conflict-1`, { spec: { size: 2 } }, "application/merge-patch+json");
    for (const target of ["", "/status"]) {
      const stale = await h2(server, "PUT", `${WIDGETS_PATH}/conflict-1${target}`, { ...widget("conflict-1"), metadata: created.metadata, status: { phase: "Ready" } });
      assert.equal(stale.status, 409);
      assert.deepEqual(stale.body, {
        kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", reason: "Conflict", code: 409,
        message: 'Operation cannot be fulfilled on widgets.demo.lostwrite.dev "conflict-1": the object has been modified; please apply your changes to the latest version and try again',
        details: { name: "conflict-1", group: "demo.lostwrite.dev", kind: "widgets" },
      });
    }
    const stalePatch = await h1(server, "PATCH", `${WIDGETS_PATH}/conflict-1/status`, { metadata: { resourceVersion: created.metadata.resourceVersion }, status: { phase: "X" } }, "application/merge-patch+json");
    assert.equal(stalePatch.status, 409);
    const noRv = await h1(server, "PUT", `${WIDGETS_PATH}/conflict-1`, widget("conflict-1"));
    assert.equal(noRv.status, 422);
    const strategic = await h1(server, "PATCH", `${WIDGETS_PATH}/conflict-1`, { spec: {} }, "application/strategic-merge-patch+json");
    assert.equal(strategic.status, 415);
    const missing = await h2(server, "GET", `${WIDGETS_PATH}/nope`);
    assert.equal(missing.status, 404);
    assert.equal((missing.body as { reason: string }).reason, "NotFound");
  });
});

void describe("watch", () => {
  void it("streams events after a resourceVersion, and 410 Expired for a compacted one", async () => {
    const list = (await h1(server, "GET", WIDGETS_PATH)).body as { metadata: { resourceVersion: string } };
    const session = http2.connect(server.url, { ca: server.ca });
    try {
      const events: { type: string; object: Obj }[] = [];
      const stream = session.request({ ":path": `${WIDGETS_PATH}?watch=1&resourceVersion=${list.metadata.resourceVersion}` });
      let buffered = "";
      const got = new Promise<void>((resolve) => {
        stream.on("data", (chunk: Buffer) => {
          buffered += chunk.toString();
          const lines = buffered.split("\n");
          buffered = lines.pop() ?? "";
          for (const line of lines) events.push(JSON.parse(line) as { type: string; object: Obj });
          if (events.length >= 2) resolve();
        });
      });
      await h1(server, "POST", WIDGETS_PATH, widget("watched-1"));
      await h1(server, "PATCH", `${WIDGETS_PATH}/watched-1/status`, { status: { phase: "Ready" } }, "application/merge-patch+json");
      await got;
      assert.deepEqual(events.map((e) => [e.type, e.object.metadata.name]), [["ADDED", "watched-1"], ["MODIFIED", "watched-1"]]);
      assert.equal(events[1]?.object.status?.phase, "Ready");
      assert.ok(Number(events[1]?.object.metadata.resourceVersion) > Number(events[0]?.object.metadata.resourceVersion));
      stream.close();

      // Push the first revision out of the 50-entry history.
      for (let i = 0; i < 55; i++) await h2(server, "PATCH", `${WIDGETS_PATH}/watched-1/status`, { status: { n: i } }, "application/merge-patch+json", session);
      const expired = await h2(server, "GET", `${WIDGETS_PATH}?watch=true&resourceVersion=2`, undefined, undefined, session);
      // One line, so the helper already parsed it.
      const event = expired.body as { type: string; object: { code: number; reason: string } };
      assert.equal(event.type, "ERROR");
      assert.equal(event.object.code, 410);
      assert.equal(event.object.reason, "Expired");
    } finally {
      session.close();
    }
  });

  void it("watch-list (sendInitialEvents, client-go's default): the state now as ADDED, the initial-events-end BOOKMARK, then changes", async () => {
    const path = "/apis/demo.lostwrite.dev/v1/namespaces/watchlist/widgets";
    await h1(server, "POST", path, widget("listed-1"));
    const second = (await h1(server, "POST", path, widget("listed-2"))).body as Obj;
    const session = http2.connect(server.url, { ca: server.ca });
    try {
      const events: { type: string; object: Obj & { metadata: { annotations?: Record<string, string> } } }[] = [];
      // resourceVersion=1 is NotOlderThan's floor, not a replay's start: the objects come once each, as they are now.
      const stream = session.request({ ":path": `${path}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=1&allowWatchBookmarks=true` });
      let buffered = "";
      const got = new Promise<void>((resolve) => {
        stream.on("data", (chunk: Buffer) => {
          buffered += chunk.toString();
          const lines = buffered.split("\n");
          buffered = lines.pop() ?? "";
          for (const line of lines) events.push(JSON.parse(line) as (typeof events)[number]);
          if (events.length === 3) void h1(server, "PATCH", `${path}/listed-1/status`, { status: { phase: "Ready" } }, "application/merge-patch+json");
          if (events.length >= 4) resolve();
        });
      });
      await got;
      stream.close();
      assert.deepEqual(events.map((e) => [e.type, e.object.metadata.name ?? null]), [["ADDED", "listed-1"], ["ADDED", "listed-2"], ["BOOKMARK", null], ["MODIFIED", "listed-1"]]);
      assert.deepEqual(events[2]?.object.metadata, { resourceVersion: second.metadata.resourceVersion, annotations: { "k8s.io/initial-events-end": "true" } });
    } finally {
      session.close();
    }
  });
});

void describe("pods and EndpointSlices from the control API", () => {
  void it("lists pods by spec.nodeName", async () => {
    for (const [name, node] of [["a", "n1"], ["b", "n2"]] as const) {
      const res = await fetch(`${server.controlUrl}/objects`, {
        method: "POST", body: JSON.stringify({ apiVersion: "v1", kind: "Pod", metadata: { name, namespace: "ops" }, spec: { nodeName: node } }),
      });
      assert.equal(res.status, 200);
    }
    const onN1 = (await h2(server, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1")).body as { kind: string; items: Obj[] };
    assert.equal(onN1.kind, "PodList");
    assert.deepEqual(onN1.items.map((p) => p.metadata.name), ["a"]);
    const slice = await fetch(`${server.controlUrl}/objects`, {
      method: "POST", body: JSON.stringify({ apiVersion: "discovery.k8s.io/v1", kind: "EndpointSlice", metadata: { name: "kubernetes", namespace: "default" }, addressType: "IPv4", endpoints: [{ addresses: ["127.0.0.1"] }] }),
    });
    assert.equal(slice.status, 200);
    const slices = (await h1(server, "GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices")).body as { items: Obj[] };
    assert.equal(slices.items.length, 1);
    assert.equal((await h1(server, "POST", "/api/v1/namespaces/ops/pods", { metadata: { name: "x" } })).status, 405);
  });
});

void describe("kubectl", { skip: existsSync("/usr/bin/kubectl") ? false : "kubectl is not installed" }, () => {
  void it("gets widgets and patches their status subresource", async () => {
    const kubectl = (...args: string[]) => execa("kubectl", ["--kubeconfig", server.kubeconfigPath, "--cache-dir", `${server.dir}/kubectl-cache`, ...args]);
    await h2(server, "POST", WIDGETS_PATH, widget("kubectl-1"));
    const patched = await kubectl("patch", "widget", "kubectl-1", "--subresource=status", "--type=merge", "-p", '{"status":{"phase":"Ready","observedGeneration":1}}');
    assert.match(patched.stdout, /widget.demo.lostwrite.dev\/kubectl-1 patched/);
    const table = await kubectl("get", "widgets", "kubectl-1");
    assert.match(table.stdout, /^NAME\s+PHASE\s+GENERATION\s+OBSERVED\s+AGE\nkubectl-1\s+Ready\s+1\s+1\s+\d+s$/);
    const json = JSON.parse((await kubectl("get", "widget", "kubectl-1", "-o", "json")).stdout) as Obj;
    assert.equal(json.status?.phase, "Ready");
  });
});
