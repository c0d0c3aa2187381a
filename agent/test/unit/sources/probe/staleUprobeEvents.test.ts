// Which uprobe events the agent may take for a killed bpftrace's: those bcc
// made (its _bcc_PID suffix names the maker) on a path under the agent's
// own /proc/PID/fd/, and no other.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { eventsOnAgentFds } from "../../../../src/sources/probe/staleUprobeEvents.ts";

const EVENTS = [
  "r:uprobes/r__proc_1_fd_29_18433c0_1_bcc_36 /proc/1/fd/29:0x00000000018433c0",
  "p:uprobes/p__proc_1_fd_29_1847da0_1_bcc_36 /proc/1/fd/29:0x0000000001847da0",
  "p:uprobes/p__proc_12_fd_3_1000_1_bcc_40 /proc/12/fd/3:0x0000000000001000",
  "p:uprobes/p__proc_1_fd_7_2000_1_bcc_41 /proc/1/fd/7:0x0000000000002000 arg1=%di",
  "p:uprobes/my_probe /proc/1/fd/29:0x00000000018433c0",
  "p:uprobes/p__usr_bin_true_1000_1_bcc_40 /usr/bin/true:0x0000000000001000",
  "",
].join("\n");

describe("uprobe events on the agent's descriptors", { timeout: 10_000 }, () => {
  it("are bcc's events on /proc/PID/fd/ of that pid, with the pid that made each", () => {
    assert.deepEqual(eventsOnAgentFds(EVENTS, 1), [
      { name: "uprobes/r__proc_1_fd_29_18433c0_1_bcc_36", maker: 36 },
      { name: "uprobes/p__proc_1_fd_29_1847da0_1_bcc_36", maker: 36 },
      { name: "uprobes/p__proc_1_fd_7_2000_1_bcc_41", maker: 41 },
    ]);
  });

  it("are none for another agent's pid, a path of its own, or a name bcc did not give", () => {
    assert.deepEqual(eventsOnAgentFds(EVENTS, 2), []);
    assert.deepEqual(eventsOnAgentFds(EVENTS, 12).map((e) => e.name), ["uprobes/p__proc_12_fd_3_1000_1_bcc_40"]);
    assert.deepEqual(eventsOnAgentFds("", 1), []);
  });
});
