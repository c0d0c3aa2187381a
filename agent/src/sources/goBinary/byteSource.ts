// Bounded random access to a binary. Operator binaries are tens of megabytes
// and a hostile or broken path could be a multi-gigabyte file, so nothing reads
// a file whole: each parser asks for the exact byte ranges it needs, and a
// range that runs past the end of the file is a truncated binary, not a crash.
import { open, type FileHandle } from "node:fs/promises";
import { NotInspectable } from "./notInspectable.ts";

export interface ByteSource {
  /** Length of the underlying file or buffer in bytes. */
  readonly size: number;
  /** Exactly `length` bytes at `offset`; NotInspectable when they are not all there. */
  read(offset: number, length: number, what: string): Promise<Buffer>;
}

/** The largest single range any parser may ask for: pclntab pieces of very large binaries fit well under it. */
const MAX_READ_BYTES = 256 * 1024 * 1024;

function checkRange(size: number, offset: number, length: number, what: string): void {
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0) {
    throw new NotInspectable(`${what}: impossible range (offset ${offset}, length ${length})`);
  }
  if (length > MAX_READ_BYTES) {
    throw new NotInspectable(`${what}: ${length} bytes is more than the ${MAX_READ_BYTES}-byte read limit`);
  }
  if (offset + length > size) {
    throw new NotInspectable(`truncated file: ${what} needs bytes ${offset}..${offset + length} but the file has ${size}`);
  }
}

interface FileSource extends ByteSource {
  close(): Promise<void>;
}

/** Opens `path` for positioned reads; the caller closes it. */
export async function openFileSource(path: string): Promise<FileSource> {
  const handle: FileHandle = await open(path, "r");
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) throw new NotInspectable(`${path} is not a regular file`);
    const size = stat.size;
    return {
      size,
      async read(offset, length, what) {
        checkRange(size, offset, length, what);
        const buffer = Buffer.allocUnsafe(length);
        let done = 0;
        // A positioned read may return fewer bytes than asked; loop until the
        // range is complete or the file turns out shorter than its stat said.
        while (done < length) {
          const { bytesRead } = await handle.read(buffer, done, length - done, offset + done);
          if (bytesRead === 0) throw new NotInspectable(`truncated file: ${what} ends early at byte ${offset + done}`);
          done += bytesRead;
        }
        return buffer;
      },
      close: () => handle.close(),
    };
  } catch (error) {
    await handle.close();
    throw error;
  }
}
