// A sender is who its connection says it is: the process holding the client
// end of the connection (found through a proc tree: TCP tables, fd links,
// NSpid), and a resource's claims held to it (docs/spans.md "Who may send
// spans"). The proc tree here is a directory built like /proc: symlinks may
// point at any text, so `socket:[…]` and `net:[…]` read as they do there.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { parseForwarder, matchForwarder, type ForwarderSelector } from "../../../../src/sources/spans/forwarders.ts";
import type { SpanProcess } from "../../../../src/sources/spans/indexedSpans.ts";
import { findSocketOwner } from "../../../../src/sources/spans/socketOwner.ts";
import { judgeClaims, type ConnectionSender, type KnownProcess } from "../../../../src/sources/spans/senderTrust.ts";
import { sentBy } from "../../../../src/sources/spans/spanIndex.ts";

function claimed(resource: Partial<SpanProcess> = {}): SpanProcess {
  return { sender: "claimed", pid: null, hostPid: null, podUid: null, podName: null, namespace: null, containerId: null, serviceName: "op", peerAddress: "127.0.0.1", ...resource };
}

const victim: KnownProcess = { hostPid: 4242, nsPid: 4242, comm: "victim", namespace: null, pod: null };
const podded: KnownProcess = { hostPid: 5151, nsPid: 1, comm: "manager", namespace: "ops", pod: "widget-a" };
const forger: ConnectionSender = { kind: "other", processes: [{ hostPid: 6666, nsPid: 6666, comm: "forger" }], name: "forger[6666]" };
const hostMode = { podsKnown: false, namedTarget: (c: SpanProcess) => (c.pid === victim.nsPid ? victim : null) };

void describe("claims against the connection's sender", { timeout: 10_000 }, () => {
  void test("from a target: its own pid, or none, makes the spans that process's, matched on its host pid", () => {
    for (const pid of [4242, null]) {
      const verdict = judgeClaims(claimed({ pid }), { kind: "target", process: victim }, hostMode);
      assert.ok(verdict.ok && verdict.proven);
      assert.deepEqual([verdict.process.sender, verdict.process.hostPid, verdict.process.pid], ["process", 4242, 4242]);
      assert.equal(sentBy(verdict.process, { nsPid: 4242, hostPid: 4242, namespace: null, pod: null }), true);
      assert.equal(sentBy(verdict.process, { nsPid: 4242, hostPid: 999, namespace: null, pod: null }), false, "another process that sees itself as 4242");
    }
  });

  void test("from a target: another pid is refused, naming the claim and the actual sender", () => {
    const verdict = judgeClaims(claimed({ pid: 4243 }), { kind: "target", process: victim }, hostMode);
    assert.ok(!verdict.ok);
    assert.equal(verdict.reason, "sender_mismatch");
    assert.equal(verdict.detail, "resource process.pid=4243, but the connection is victim[4242]'s");
    const anotherTarget = judgeClaims(claimed({ pid: 4242 }), { kind: "target", process: podded }, hostMode);
    assert.ok(!anotherTarget.ok);
    assert.equal(anotherTarget.detail, "resource process.pid=4242 (target victim[4242]), but the connection is manager[5151] (pod ops/widget-a)'s");
  });

  void test("the pid a process in a PID namespace claims is its innermost NSpid", () => {
    const ok = judgeClaims(claimed({ pid: 1, podName: "widget-a", namespace: "ops" }), { kind: "target", process: podded }, { podsKnown: true, namedTarget: () => null });
    assert.ok(ok.ok);
    assert.deepEqual([ok.process.hostPid, ok.process.pid, ok.process.podName], [5151, 1, "widget-a"]);
    const host = judgeClaims(claimed({ pid: 5151 }), { kind: "target", process: podded }, { podsKnown: true, namedTarget: () => null });
    assert.ok(!host.ok, "its host pid is not what it sees");
  });

  void test("a pod named: checked where pods are known, dropped where they are not", () => {
    const other = judgeClaims(claimed({ pid: 1, podName: "widget-b" }), { kind: "target", process: podded }, { podsKnown: true, namedTarget: () => null });
    assert.ok(!other.ok);
    assert.match(other.detail, /resource k8s\.pod\.name="widget-b", but the connection is manager\[5151\] \(pod ops\/widget-a\)'s/);
    const nodeProcess = judgeClaims(claimed({ pid: 4242, podName: "widget-a", namespace: "ops" }), { kind: "target", process: victim }, { podsKnown: true, namedTarget: () => null });
    assert.ok(!nodeProcess.ok, "a process of the node is in no pod");
    const unknowable = judgeClaims(claimed({ pid: 4242, podName: "widget-a", namespace: "ops" }), { kind: "target", process: victim }, hostMode);
    assert.ok(unknowable.ok);
    assert.deepEqual([unknowable.process.podName, unknowable.process.namespace], [null, null]);
  });

  void test("from a process that is no target: a target's pid is refused; its own, or none, is taken but proves nothing", () => {
    const forged = judgeClaims(claimed({ pid: 4242 }), forger, hostMode);
    assert.ok(!forged.ok);
    assert.equal(forged.detail, "resource process.pid=4242 (target victim[4242]), but the connection is forger[6666]'s");
    for (const pid of [6666, null, 31337]) {
      const verdict = judgeClaims(claimed({ pid }), forger, hostMode);
      assert.ok(verdict.ok && !verdict.proven, String(pid));
    }
    const nobody = judgeClaims(claimed({ pid: 4242 }), { kind: "other", processes: [], name: "an unknown process at 127.0.0.1:5000" }, hostMode);
    assert.ok(!nobody.ok);
  });

  void test("from a configured forwarder: the resource as sent", () => {
    const verdict = judgeClaims(claimed({ pid: 4242, podName: "x" }), { kind: "forwarder", name: "otelcol[7]" }, hostMode);
    assert.ok(verdict.ok && verdict.proven);
    assert.deepEqual([verdict.process.sender, verdict.process.pid, verdict.process.podName], ["claimed", 4242, "x"]);
  });
});

void describe("forwarder selectors", { timeout: 10_000 }, () => {
  void test("parsed, or refused with what was expected", () => {
    assert.deepEqual(parseForwarder("exe:/usr/bin/otelcol-contrib"), { kind: "exe", path: "/usr/bin/otelcol-contrib", text: "exe:/usr/bin/otelcol-contrib" });
    assert.deepEqual(parseForwarder("pod:observability/otel-agent-*"), { kind: "pod", namespace: "observability", name: "otel-agent-", prefix: true, text: "pod:observability/otel-agent-*" });
    for (const [text, error] of [
      ["otelcol", /expected exe:\/PATH or pod:NAMESPACE\/NAME/],
      ["exe:otelcol", /expected exe:\/ABSOLUTE\/PATH/],
      ["pod:observability", /expected pod:NAMESPACE\/NAME/],
      ["pod:Obs/x", /expected pod:NAMESPACE\/NAME/],
      ["pod:obs/Bad_Name", /"Bad_Name" is not a pod name/],
    ] as const) {
      const parsed = parseForwarder(text);
      assert.ok("error" in parsed, text);
      assert.match(parsed.error, error);
    }
  });

  void test("matched on the executable, or the pod", () => {
    const selectors = ["exe:/usr/bin/otelcol", "pod:observability/otel-agent-*", "pod:ops/relay"].map((t) => parseForwarder(t) as ForwarderSelector);
    assert.equal(matchForwarder(selectors, { exe: "/usr/bin/otelcol", pod: null })?.text, "exe:/usr/bin/otelcol");
    assert.equal(matchForwarder(selectors, { exe: "/tmp/otelcol", pod: null }), null);
    assert.equal(matchForwarder(selectors, { exe: null, pod: { namespace: "observability", pod: "otel-agent-x7k2p" } })?.text, "pod:observability/otel-agent-*");
    assert.equal(matchForwarder(selectors, { exe: null, pod: { namespace: "ops", pod: "relay-2" } }), null, "no prefix without a *");
    assert.equal(matchForwarder(selectors, { exe: null, pod: { namespace: "other", pod: "otel-agent-x" } }), null);
  });
});

void describe("the process holding a connection's client end", { timeout: 10_000 }, () => {
  let proc: string;
  // The agent's namespace: a client at 127.0.0.1:41668 → 127.0.0.1:4318 (inode 91300).
  const own = "   1: 0100007F:A2C4 0100007F:10DE 01 00000000:00000000 00:00000000 00000000  1000        0 91300 1\n";
  // A pod's namespace: 10.213.0.2:40000 → 10.213.0.1:4318 (inode 500).
  const pod = "   1: 0200D50A:9C40 0100D50A:10DE 01 00000000:00000000 00:00000000 00000000  1000        0 500 1\n";

  async function fakeProcess(pid: number | "self", opts: { fds?: string[]; net?: string; tcp?: string }): Promise<void> {
    const dir = path.join(proc, String(pid));
    await mkdir(path.join(dir, "fd"), { recursive: true });
    await mkdir(path.join(dir, "ns"), { recursive: true });
    await mkdir(path.join(dir, "net"), { recursive: true });
    for (const [i, target] of (opts.fds ?? []).entries()) await symlink(target, path.join(dir, "fd", String(i)));
    await symlink(opts.net ?? "net:[4026531840]", path.join(dir, "ns", "net"));
    await writeFile(path.join(dir, "net", "tcp"), `  sl  local_address rem_address   st\n${opts.tcp ?? ""}`);
  }

  before(async () => {
    proc = await mkdtemp(path.join(os.tmpdir(), "lostwrite-proc-"));
    await fakeProcess("self", { tcp: own });
    await fakeProcess(100, { fds: ["/dev/null", "socket:[7]"] }); // a target, holding something else
    await fakeProcess(200, { fds: ["pipe:[3]", "socket:[91300]"] }); // no target: the sender
    await fakeProcess(300, { fds: ["socket:[500]"], net: "net:[4026532000]", tcp: pod }); // a target in a pod
  });
  after(() => rm(proc, { recursive: true, force: true }));

  const conn = (client: [string, number], server: [string, number]) => ({ client: { address: client[0], port: client[1] }, server: { address: server[0], port: server[1] } });

  void test("a loopback client that is no target is found by the bounded scan of the others", async () => {
    const owner = await findSocketOwner({ procRoot: proc, targets: () => [100, 300] }, conn(["127.0.0.1", 41668], ["127.0.0.1", 4318]));
    assert.deepEqual(owner, { inode: 91300, pids: [200], truncated: false });
    const bounded = await findSocketOwner({ procRoot: proc, targets: () => [100, 300], maxScannedProcesses: 0 }, conn(["127.0.0.1", 41668], ["127.0.0.1", 4318]));
    assert.deepEqual(bounded, { inode: 91300, pids: [], truncated: true });
  });

  void test("a target in a pod's own network namespace, through its own net/tcp", async () => {
    const owner = await findSocketOwner({ procRoot: proc, targets: () => [100, 300] }, conn(["10.213.0.2", 40000], ["10.213.0.1", 4318]));
    assert.deepEqual(owner, { inode: 500, pids: [300], truncated: false });
  });

  void test("a socket in no namespace the agent reads is no one's", async () => {
    assert.equal(await findSocketOwner({ procRoot: proc, targets: () => [100] }, conn(["10.213.0.2", 40000], ["10.213.0.1", 4318])), null);
    assert.equal(await findSocketOwner({ procRoot: proc, targets: () => [100, 300] }, conn(["127.0.0.1", 40000], ["127.0.0.1", 4318])), null, "loopback stays in the agent's namespace");
  });
});
