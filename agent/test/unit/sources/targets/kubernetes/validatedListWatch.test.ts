// The list+watch loop against a scripted HTTP server: which resourceVersion
// each watch starts from, a relist on 410 Gone, a rotated token, and errors
// that carry the apiserver's status and message.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { KubernetesApi, KubernetesApiError } from "../../../../../src/sources/targets/kubernetes/kubeApi.ts";
import { ValidatedListWatch } from "../../../../../src/sources/targets/kubernetes/validatedListWatch.ts";

const PATH = "/api/v1/configmaps";
const Schema = z.object({ metadata: z.object({ name: z.string().min(1), namespace: z.string().min(1) }), data: z.record(z.string(), z.string()) });
type Item = z.infer<typeof Schema>;

const item = (name: string, rv: string, value = "1") => ({ metadata: { name, namespace: "ns", resourceVersion: rv }, data: { value } });

/** Answers each request with the next scripted handler, and records what was asked. */
async function scriptedServer(t: TestContext, script: ((req: IncomingMessage, res: ServerResponse) => void)[]) {
  const requests: { query: URLSearchParams; authorization: string | undefined }[] = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://x");
    requests.push({ query: url.searchParams, authorization: req.headers.authorization });
    wake();
    const next = script.shift();
    if (next) next(req, res);
    else req.on("close", () => undefined); // further watches hang until the test stops
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests };
}

const json = (body: unknown, status = 200) => (_req: IncomingMessage, res: ServerResponse) => {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
};
const events = (...lines: unknown[]) => (_req: IncomingMessage, res: ServerResponse) => {
  res.writeHead(200, { "content-type": "application/json" });
  res.end(lines.map((l) => JSON.stringify(l) + "\n").join(""));
};

function listWatch(t: TestContext, api: KubernetesApi, onError: (err: unknown) => void = () => undefined) {
  const changes: string[][] = [];
  const lw: ValidatedListWatch<Item> = new ValidatedListWatch<Item>({
    api,
    path: PATH,
    schema: Schema,
    fieldSelector: "spec.nodeName=n",
    maxObjects: 10,
    onChange: () => {
      changes.push(lw.objects().map((o) => `${o.metadata.name}=${o.data.value}`));
      wake();
    },
    onInvalid: () => undefined,
    onCapacity: () => undefined,
    onError,
    restartDelayMs: 10,
  });
  t.after(async () => {
    await lw.stop();
    api.close();
  });
  return { lw, changes };
}

/** The checks of the waits in progress, run again whenever a request or a change arrives. */
const waits = new Set<() => void>();
const wake = (): void => {
  for (const check of [...waits]) check();
};

/** Resolves once `ok()` holds, checked at each request and change; fails after 5 s. */
function until(what: string, ok: () => boolean): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      waits.delete(check);
      reject(new Error(`timed out waiting for ${what}`));
    }, 5000);
    function check(): void {
      if (!ok()) return;
      clearTimeout(timer);
      waits.delete(check);
      resolve();
    }
    waits.add(check);
    check();
  });
}

void test("watches from the list's version, then from the last event or bookmark; lists again on 410 Gone", async (t) => {
  const { server, requests } = await scriptedServer(t, [
    json({ metadata: { resourceVersion: "10" }, items: [item("a", "9")] }),
    // The first watch: an update and a bookmark, then the server ends it (its timeout).
    events({ type: "MODIFIED", object: item("a", "11", "2") }, { type: "BOOKMARK", object: { metadata: { resourceVersion: "15" } } }),
    // The next one is told its version is too old.
    events({ type: "ERROR", object: { kind: "Status", code: 410, message: "too old resource version: 15 (20)" } }),
    json({ metadata: { resourceVersion: "20" }, items: [item("a", "18", "3"), item("b", "19")] }),
    // And once as the watch's HTTP status.
    json({ kind: "Status", code: 410, message: "too old resource version" }, 410),
    json({ metadata: { resourceVersion: "30" }, items: [item("b", "19")] }),
  ]);
  const errors: unknown[] = [];
  const { lw, changes } = listWatch(t, new KubernetesApi({ server, source: "test" }), (err) => errors.push(err));
  await lw.start();
  await until("the relists and the watch after them", () => requests.length >= 7);
  const asked = requests.map((r) => `${r.query.get("watch") ?? "list"} ${r.query.get("resourceVersion") ?? ""}`.trim());
  assert.deepEqual(asked, ["list", "true 10", "true 15", "list", "true 20", "list", "true 30"]);
  for (const r of requests) assert.equal(r.query.get("fieldSelector"), "spec.nodeName=n");
  assert.equal(requests[1]!.query.get("allowWatchBookmarks"), "true");
  assert.deepEqual(changes, [["a=1"], ["a=2"], ["a=3", "b=1"], ["b=1"]]);
  assert.deepEqual(errors, [], "a 410 is a relist, not an error");
});

void test("a token file is read again for every request (a ServiceAccount's token is rotated)", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "lostwrite-token-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const tokenFile = join(dir, "token");
  await writeFile(tokenFile, "first\n");
  const { server, requests } = await scriptedServer(t, [
    json({ metadata: { resourceVersion: "1" }, items: [] }),
    (req, res) => {
      void writeFile(tokenFile, "second\n").then(() => res.writeHead(200).end());
    },
  ]);
  const { lw } = listWatch(t, new KubernetesApi({ server, tokenFile, source: "test" }));
  await lw.start();
  await until("the watch after the first one ended", () => requests.length >= 3);
  assert.deepEqual(
    requests.map((r) => r.authorization),
    ["Bearer first", "Bearer first", "Bearer second"],
  );
});

void test("a refused list is an error with the status code and the apiserver's message, retried", async (t) => {
  const { server, requests } = await scriptedServer(t, [
    json({ kind: "Status", code: 403, message: 'configmaps is forbidden: User "lostwrite" cannot list resource "configmaps"' }, 403),
    json({ metadata: { resourceVersion: "1" }, items: [item("a", "1")] }),
  ]);
  const errors: unknown[] = [];
  const { lw, changes } = listWatch(t, new KubernetesApi({ server, source: "test" }), (err) => errors.push(err));
  await lw.start();
  assert.equal(errors.length, 1);
  const err = errors[0] as KubernetesApiError;
  assert.ok(err instanceof KubernetesApiError);
  assert.equal(err.statusCode, 403);
  assert.equal(err.message, `GET ${PATH}: 403 configmaps is forbidden: User "lostwrite" cannot list resource "configmaps"`);
  await until("the retried list", () => changes.length === 1);
  assert.equal(lw.listed, true);
  assert.ok(requests.length >= 2);
});

void test("a watch line that is not JSON ends the watch with an error naming it, and the loop lists again", async (t) => {
  const { server, requests } = await scriptedServer(t, [
    json({ metadata: { resourceVersion: "1" }, items: [] }),
    (_req, res) => res.writeHead(200).end("<html>proxy error</html>\n"),
    json({ metadata: { resourceVersion: "2" }, items: [item("a", "2")] }),
  ]);
  const errors: unknown[] = [];
  const { lw, changes } = listWatch(t, new KubernetesApi({ server, source: "test" }), (err) => errors.push(err));
  await lw.start();
  await until("the relist", () => changes.length === 2);
  assert.match(String(errors[0]), /watch \/api\/v1\/configmaps: an event is not JSON: <html>proxy error<\/html>/);
  assert.equal(requests[2]!.query.get("watch"), null, "listed again");
});

void test("a server URL that is neither https nor http is refused at once", () => {
  assert.throws(() => new KubernetesApi({ server: "ftp://a", source: "kubeconfig k" }), /kubeconfig k: server "ftp:\/\/a" is neither https:\/\/ nor http:\/\//);
});
