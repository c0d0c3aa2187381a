// Errno numbers and names, from the platform's own table (os.constants.errno):
// the name a probe's number becomes, and the closed set of names a metric
// label may carry, so that a corrupt probe line cannot mint new series.
import os from "node:os";

/** Every name the platform knows, aliases included (EWOULDBLOCK as well as EAGAIN). */
export const ERRNO_LABELS = Object.keys(os.constants.errno) as readonly string[];

// Aliases share a number (EWOULDBLOCK = EAGAIN): the first, canonical name wins.
const ERRNO_NAMES = new Map<number, string>();
for (const [name, value] of Object.entries(os.constants.errno)) if (!ERRNO_NAMES.has(value)) ERRNO_NAMES.set(value, name);

/** The symbolic name of an errno number; `E<n>` for one the platform does not name. */
export function errnoName(errno: number): string {
  return ERRNO_NAMES.get(errno) ?? `E${errno}`;
}
