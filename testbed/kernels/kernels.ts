// The kernels the smoke suite boots: the Debian kernels users run, by the
// package that carries each one. Debian 12 (bookworm) ships 6.1 LTS and
// backports 6.12; Debian 11 (bullseye) ships 5.10. The package is pinned to
// one ABI, so a run boots the same kernel until this list changes.

export interface Kernel {
  /** What the suite and docs/kernels.md call it. */
  name: string;
  /** The Debian package of the kernel image and its modules. */
  package: string;
  /** The Debian suite whose archive has it. */
  suite: "bookworm" | "bullseye";
}

export const KERNELS: readonly Kernel[] = [
  { name: "5.10", package: "linux-image-5.10.0-46-amd64", suite: "bullseye" },
  { name: "6.1", package: "linux-image-6.1.0-57-amd64", suite: "bookworm" },
  { name: "6.12", package: "linux-image-6.12.118+deb12-amd64", suite: "bookworm" },
];

export function kernelNamed(name: string): Kernel {
  const kernel = KERNELS.find((k) => k.name === name || k.package === name);
  if (!kernel) throw new Error(`unknown kernel "${name}": one of ${KERNELS.map((k) => k.name).join(", ")}`);
  return kernel;
}
