// 64-bit fields of an ELF file or a Go table as JavaScript numbers. Addresses
// and offsets of real amd64 binaries stay far below 2^53, so a larger value
// means a corrupt file, and is rejected rather than silently rounded.
import { NotInspectable } from "./notInspectable.ts";

export function readU64(buffer: Buffer, offset: number, what: string): number {
  const value = buffer.readBigUInt64LE(offset);
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new NotInspectable(`${what} is 0x${value.toString(16)}, too large for a real binary`);
  }
  return Number(value);
}
