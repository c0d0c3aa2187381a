// How to run the go command of a matrix cell: which binary, which
// environment. Module cells pin x/net in a throwaway go.mod; Debian's Go 1.19
// builds in GOPATH mode, its x/net the Debian package's sources.
import { existsSync } from "node:fs";
import path from "node:path";
import { goEnv } from "../goBuild.ts";
import type { MatrixCell } from "./cells.ts";

export interface CellToolchain {
  go: string;
  env: NodeJS.ProcessEnv;
  /** Whether x/net is chosen through go.mod (false: GOPATH mode). */
  modules: boolean;
}

export function cellToolchain(cell: MatrixCell): CellToolchain {
  const t = cell.toolchain;
  switch (t.kind) {
    case "local":
      return { go: "go", env: { ...goEnv(), GOTOOLCHAIN: "local" }, modules: true };
    case "toolchain":
      return { go: "go", env: { ...goEnv(), GOTOOLCHAIN: t.version }, modules: true };
    case "debian": {
      const env: NodeJS.ProcessEnv = { ...goEnv(), GO111MODULE: "off", GOPATH: t.gopath, GOFLAGS: "" };
      // The go binary finds its own GOROOT; one inherited would be another release's.
      delete env.GOROOT;
      delete env.GOTOOLCHAIN;
      return { go: path.join(t.goroot, "bin", "go"), env, modules: false };
    }
  }
}

/** Why the cell's toolchain cannot run here (a package to install), or null. */
export function cellToolchainMissing(cell: MatrixCell): string | null {
  const t = cell.toolchain;
  if (t.kind !== "debian") return null;
  const missing = [
    existsSync(path.join(t.goroot, "bin", "go")) ? null : "golang-1.19-go",
    existsSync(path.join(t.gopath, "src", "golang.org", "x", "net", "http2")) ? null : "golang-golang-x-net-dev",
  ].filter((p) => p !== null);
  return missing.length === 0 ? null : `${cell.id} needs Debian's ${missing.join(" and ")} (apt-get install ${missing.join(" ")})`;
}

/** A test's skip for a cell whose toolchain is not installed: skipped outside CI; under CI=true not skipped, so that it fails. */
export function cellSkip(cell: MatrixCell): string | false {
  const missing = cellToolchainMissing(cell);
  return missing !== null && process.env.CI !== "true" ? missing : false;
}
