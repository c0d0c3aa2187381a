// Where a Go function's uprobe may go: the entry's stack check in its three
// encodings, and the JLS after it (the cheaper place: the kernel emulates a
// jump, but single-steps the compare).
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { stackCheckBranchOffset, startsWithGoStackCheck } from "../../../../src/sources/goBinary/stackCheckPrologue.ts";

const hex = (text: string): Buffer => Buffer.from(text.replace(/\s+/g, ""), "hex");

describe("the stack check at a Go function's entry", { timeout: 10_000 }, () => {
  const cases: [string, string, number][] = [
    ["small frame, JLS rel8", "49 3b 66 10 | 76 2b | 55 48 89 e5", 4],
    ["small frame, JLS rel32", "49 3b 66 10 | 0f 86 10 02 00 00 | 55", 4],
    ["< 4 KiB frame (disp8)", "4c 8d 64 24 f8 4d 3b 66 10 | 76 40", 9],
    ["< 4 KiB frame (disp32)", "4c 8d a4 24 00 ff ff ff 4d 3b 66 10 | 0f 86 aa 00 00 00", 12],
    ["huge frame, JB rel8", "49 89 e4 49 81 ec 00 20 00 00 72 07 4d 3b 66 10 | 0f 86 00 01 00 00", 16],
    ["huge frame, JB rel32", "49 89 e4 49 81 ec 00 20 00 00 0f 82 01 00 00 00 4d 3b 66 10 | 76 05", 20],
  ];
  for (const [form, bytes, offset] of cases) {
    it(`finds the JLS after the ${form} form at +${offset}`, () => {
      const code = hex(bytes.replace(/\|/g, ""));
      assert.ok(startsWithGoStackCheck(code));
      assert.equal(stackCheckBranchOffset(code), offset);
    });
  }

  it("answers null where the check is not followed by a JLS, or the code is cut short, or is no check at all", () => {
    assert.equal(stackCheckBranchOffset(hex("49 3b 66 10 75 2b")), null, "JNE is not the morestack branch");
    assert.equal(stackCheckBranchOffset(hex("49 3b 66 10 0f 87 00 00 00 00")), null, "JA is not JLS");
    assert.equal(stackCheckBranchOffset(hex("49 3b 66 10 0f 86 00")), null, "a rel32 cut short");
    assert.equal(stackCheckBranchOffset(hex("49 3b 66 10")), null, "nothing after the check");
    assert.equal(stackCheckBranchOffset(hex("55 48 89 e5 76 00")), null, "a C prologue");
  });
});
