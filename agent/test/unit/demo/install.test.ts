import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { commandLine, isDebianLike, planInstall, type MachineState } from "../../../src/demo/install.ts";

const ready: MachineState = { root: true, apt: true, bpftrace: true, python3: true, tracefs: true };

describe("what the demo installs on a fresh machine", { timeout: 10_000 }, () => {
  it("nothing on a machine that has it all", () => {
    assert.deepEqual(planInstall(ready), []);
  });

  it("the distribution's bpftrace (lists refreshed first) and a tracefs mount, in that order", () => {
    const steps = planInstall({ ...ready, bpftrace: false, tracefs: false });
    assert.deepEqual(
      steps.map((s) => commandLine(s, false)),
      ["apt-get update", "apt-get install -y --no-install-recommends bpftrace", "mount -t tracefs nodev /sys/kernel/tracing"],
    );
    assert.match(steps[1]!.why, /bpftrace is not installed/);
  });

  it("python3 with bpftrace in one install; only the mount when only tracefs is missing", () => {
    assert.deepEqual(planInstall({ ...ready, bpftrace: false, python3: false })[1]!.argv.slice(-2), ["bpftrace", "python3"]);
    assert.deepEqual(planInstall({ ...ready, tracefs: false }).map((s) => s.argv[0]), ["mount"]);
  });

  it("says sudo for someone who is not root", () => {
    assert.equal(commandLine(planInstall({ ...ready, root: false, tracefs: false })[0]!, true), "sudo mount -t tracefs nodev /sys/kernel/tracing");
  });

  it("knows Debian, Ubuntu and their derivatives from /etc/os-release, and nothing else", () => {
    assert.equal(isDebianLike('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'), true);
    assert.equal(isDebianLike("ID=ubuntu\nID_LIKE=debian\n"), true);
    assert.equal(isDebianLike('ID=linuxmint\nID_LIKE="ubuntu debian"\n'), true);
    assert.equal(isDebianLike('ID=fedora\nID_LIKE=""\n'), false);
    assert.equal(isDebianLike('ID="rhel"\nID_LIKE="fedora"\n'), false);
    assert.equal(isDebianLike(""), false);
  });
});
