// The build matrix: the Go toolchains and golang.org/x/net versions a Go
// operator is built with in the wild, each x/net version one where the
// HTTP/2 client's layout changed (≤v0.30, v0.31–v0.43, v0.44–v0.53, ≥v0.54).
// A cell is (go, x/net, build tags); testbed/go-operator is built for each.

/** Where a cell's toolchain comes from. */
export type Toolchain =
  /** Debian 12's golang-1.19-go, building in GOPATH mode against golang-golang-x-net-dev's sources. */
  | { kind: "debian"; version: "go1.19"; goroot: string; gopath: string }
  /** The go on PATH (GOTOOLCHAIN=local), which must be exactly `version`. */
  | { kind: "local"; version: string }
  /** A release the go command runs through GOTOOLCHAIN (from the module cache, or the proxy once). */
  | { kind: "toolchain"; version: string };

export interface MatrixCell {
  /** Directory name and table label, e.g. "go1.26.8-xnet0.43.0". */
  id: string;
  toolchain: Toolchain;
  /** The golang.org/x/net version compiled in. */
  xNet: string;
  tags: readonly string[];
}

const DEBIAN_GO = { kind: "debian", version: "go1.19", goroot: "/usr/lib/go-1.19", gopath: "/usr/share/gocode" } as const;
const LOCAL_GO = { kind: "local", version: "go1.26.8" } as const;
const GO_127 = { kind: "toolchain", version: "go1.27.3" } as const;

function cell(toolchain: Toolchain, xNet: string, tags: readonly string[] = []): MatrixCell {
  const label = [toolchain.version, `xnet${xNet.replace(/^v/, "")}`, ...(toolchain.kind === "debian" ? ["debian"] : []), ...tags];
  return { id: label.join("-"), toolchain, xNet, tags };
}

export const MATRIX_CELLS: readonly MatrixCell[] = [
  // Debian packages x/net 0.7.0 for its Go 1.19: what a distribution-built operator links.
  cell(DEBIAN_GO, "v0.7.0"),
  cell(LOCAL_GO, "v0.30.0"),
  cell(LOCAL_GO, "v0.43.0"),
  cell(LOCAL_GO, "v0.53.0"),
  cell(LOCAL_GO, "v0.63.0"),
  // From Go 1.27, x/net's http2.Transport hands requests to net/http, whose
  // HTTP/2 is net/http/internal/http2; the http2legacy tag keeps x/net's own.
  cell(GO_127, "v0.63.0"),
  cell(GO_127, "v0.63.0", ["http2legacy"]),
];
