// Which Go release built a binary, as far as the probes care: the minor
// version. It decides the calling convention (amd64 passes arguments in
// registers since Go 1.17, on the stack before) and, with the x/net version,
// the struct layouts the probes read.
import type { PclntabLayout } from "./pclntabHeader.ts";

/** The first release with the register ABI on amd64. */
export const FIRST_REGISTER_ABI_MINOR = 17;

/** Minor version in "go1.23.8", "go1.21rc2", "devel go1.24-abc123 …"; null when there is none. */
export function goMinorFromVersion(version: string): number | null {
  const match = /go1\.(\d+)/.exec(version);
  return match === null ? null : Number(match[1]);
}

/** The oldest release that writes a pclntab of this layout. */
export function oldestMinorForLayout(layout: PclntabLayout): number {
  switch (layout) {
    case "go1.2":
      return 2;
    case "go1.16":
      return 16;
    case "go1.18":
      return 18;
    case "go1.20":
      return 20;
  }
}
