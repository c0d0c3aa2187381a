// The send hook costs every send of every process on the node: it is left
// out only when nothing it would see is needed, and a target it would judge
// or a rule that can add one keeps it.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { sendHookNeed } from "../../../../src/sources/probe/sendHook.ts";

describe("sendHookNeed", { timeout: 10_000 }, () => {
  it("is not needed when every target is followed per request and no rule can add one", () => {
    assert.deepEqual(sendHookNeed({ targets: [42, 43], requestLevel: [43, 42], execWatch: false }), { needed: false });
  });

  it("is not needed with no target and no rule: an idle agent costs the node's sends nothing", () => {
    assert.deepEqual(sendHookNeed({ targets: [], execWatch: false }), { needed: false });
  });

  it("is needed for a target on the socket path, and names it", () => {
    assert.deepEqual(sendHookNeed({ targets: [42, 43], requestLevel: [42], execWatch: false }), { needed: true, why: "target", pid: 43 });
    assert.deepEqual(sendHookNeed({ targets: [7] }), { needed: true, why: "target", pid: 7 });
  });

  it("is needed while rules can make a program started later a target, even with every current target followed", () => {
    // A short-lived client's first sends come before any bpftrace could attach for it.
    assert.deepEqual(sendHookNeed({ targets: [42], requestLevel: [42], execWatch: true }), { needed: true, why: "rules" });
    assert.deepEqual(sendHookNeed({ targets: [], execWatch: true }), { needed: true, why: "rules" });
  });

  it("with --send-hook targets, leaves the rules out: only a target on the socket path needs it", () => {
    assert.deepEqual(sendHookNeed({ targets: [42], requestLevel: [42], execWatch: true, sendHookForRules: false }), { needed: false });
    assert.deepEqual(sendHookNeed({ targets: [42, 43], requestLevel: [42], execWatch: true, sendHookForRules: false }), { needed: true, why: "target", pid: 43 });
    assert.deepEqual(sendHookNeed({ targets: [42], requestLevel: [42], execWatch: true, sendHookForRules: true }), { needed: true, why: "rules" });
  });

  it("does not count a followed pid that is no target as a reason either way", () => {
    assert.deepEqual(sendHookNeed({ targets: [], requestLevel: [99], execWatch: false }), { needed: false });
  });
});
