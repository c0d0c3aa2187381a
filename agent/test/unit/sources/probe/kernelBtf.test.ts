// The kernel's BTF cut to what the programs read: the structs they name whole,
// what those hold by value whole, and behind a pointer whole only what a
// field the programs read points to; every other struct a declaration.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { describeBtf, kernelFieldOffsets, kernelFieldsOf, kernelTypeUse, trimKernelBtf } from "../../../../src/sources/probe/kernelBtf.ts";

/** fixtures/btf/types.c's BTF, made by gcc (how: in the .c file). */
const TYPES = readFileSync(new URL("../../../fixtures/btf/types.btf", import.meta.url));
const PROGRAM = "uprobe:/bin/x:f { $r = (struct root *)arg0; printf(\"%d\\n\", $r->read_me->y); }";

void describe("kernelBtf", { timeout: 10_000 }, () => {
  it("reads struct names, field names and curtask out of programs", () => {
    const use = kernelTypeUse(["$f = (struct file *)*(curtask->files->fdt->fd + $fd); $sk->__sk_common.skc_dport", "union choice"]);
    assert.deepEqual([...use.structs].sort(), ["choice", "file", "task_struct"]);
    assert.deepEqual([...use.fields].sort(), ["__sk_common", "fd", "fdt", "files", "skc_dport"]);
  });

  it("keeps the named struct whole, with what it holds by value and what it reads through a pointer; declares the rest", () => {
    const cut = describeBtf(trimKernelBtf(TYPES, kernelTypeUse([PROGRAM])));
    const root = cut.find((line) => line.startsWith("struct root "));
    assert.equal(
      root,
      "struct root { by_value: struct inner; not_read: *fwd struct hidden; read_me: *struct opened; const_read_me: *const struct opened; " +
        "(anon): union (anon); anonymous_behind_pointer: *struct (anon); callback: *fn(*fwd struct hidden) int; self: *struct root; " +
        "refs: atomic_like; picked: *fwd union choice; table: **struct opened; bits: unsigned int; which: enum (anon); name: char[16] }",
    );
    // Whole: held by value, or read through (read_me), or anonymous (nothing to declare it by).
    assert.ok(cut.includes("struct inner { x: int }"), cut.join("\n"));
    assert.ok(cut.includes("struct opened { y: int; deeper: *fwd struct hidden }"), cut.join("\n"));
    assert.ok(cut.includes("struct (anon) { h: *fwd struct hidden }"), cut.join("\n"));
    assert.ok(cut.includes("struct (anon) { counter: int }"), cut.join("\n"));
    // Declared, once each: nothing reads a field of theirs.
    assert.deepEqual(cut.filter((line) => line.startsWith("fwd ")).sort(), ["fwd struct hidden", "fwd union choice"]);
    assert.ok(!cut.some((line) => line.startsWith("struct hidden {")), "struct hidden is not written whole");
  });

  it("keeps a struct whole when a program names it, wherever it is pointed to from", () => {
    const cut = describeBtf(trimKernelBtf(TYPES, kernelTypeUse([PROGRAM, "(struct hidden *)$h"])));
    assert.ok(cut.includes("struct hidden { secret: long int }"), cut.join("\n"));
    assert.ok(cut.includes("struct opened { y: int; deeper: *struct hidden }"), cut.join("\n"));
    assert.ok(!cut.some((line) => line.startsWith("fwd struct hidden")), cut.join("\n"));
  });

  it("is a fixed point: the cut of a cut is the same bytes", () => {
    const use = kernelTypeUse([PROGRAM]);
    const cut = trimKernelBtf(TYPES, use);
    assert.ok(cut.byteLength < TYPES.byteLength);
    assert.deepEqual(Buffer.from(trimKernelBtf(cut, use)), Buffer.from(cut));
  });

  it("leaves out a struct the kernel lacks", () => {
    const cut = describeBtf(trimKernelBtf(TYPES, kernelTypeUse(["(struct nowhere *)$x"])));
    assert.deepEqual(cut, []);
  });

  it("finds the offsetof() fields programs take, not those their comments name", () => {
    const program = "// offsetof(struct nowhere, x)\n/* offsetof(struct gone, y) */\n$a = *kptr($r + offsetof(struct root, refs.counter)) + offsetof(struct root, name);";
    assert.deepEqual(kernelFieldsOf([program, "offsetof(struct root, name)"]).sort(), ["root.name", "root.refs.counter"]);
  });

  it("gives each field's byte offset, through members held by value and unnamed unions", () => {
    // types.c as gcc lays it out on amd64: eight 8-byte members after by_value's 4 bytes and padding.
    assert.deepEqual(kernelFieldOffsets(TYPES, ["root.by_value", "root.read_me", "root.a", "root.b", "root.refs.counter", "root.by_value.x", "root.which", "root.name", "opened.deeper"]), {
      "root.by_value": 0,
      "root.read_me": 16,
      "root.a": 32,
      "root.b": 32,
      "root.refs.counter": 64,
      "root.by_value.x": 0,
      "root.which": 92,
      "root.name": 96,
      "opened.deeper": 8,
    });
  });

  it("names the struct or field it cannot give an offset of", () => {
    assert.throws(() => kernelFieldOffsets(TYPES, ["nowhere.x"]), /BTF: no struct nowhere \(for nowhere\.x\)/);
    assert.throws(() => kernelFieldOffsets(TYPES, ["root.missing"]), /BTF: struct root has no field missing/);
    assert.throws(() => kernelFieldOffsets(TYPES, ["root.read_me.y"]), /root\.read_me is not a struct or union held by value/);
    assert.throws(() => kernelFieldOffsets(TYPES, ["root.bits"]), /field bits is a bit field of 3 bits/);
  });

  it("names what is wrong with input that is not BTF", () => {
    assert.throws(() => trimKernelBtf(TYPES.subarray(0, 10), kernelTypeUse([PROGRAM])), /BTF: 10 bytes, shorter than its 24-byte header/);
    const wrongMagic = Buffer.from(TYPES);
    wrongMagic.writeUInt16LE(0x9feb, 0);
    assert.throws(() => trimKernelBtf(wrongMagic, kernelTypeUse([PROGRAM])), /BTF: magic 0x9feb, not 0xeb9f/);
    assert.throws(() => trimKernelBtf(TYPES.subarray(0, TYPES.byteLength - 100), kernelTypeUse([PROGRAM])), /past its \d+ bytes/);
  });
});
