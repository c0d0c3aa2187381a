// The kernel field offsets the Go program reads at (go_http2.bt, NO CASTS),
// as kernelBtf.ts read them from a 6.18 kernel's BTF: the unit tests render
// programs with these, where the agent reads the running kernel's.
export const KERNEL_OFFSETS: Readonly<Record<string, number>> = {
  "task_struct.files": 1824,
  "files_struct.fdt": 32,
  "fdtable.max_fds": 0,
  "fdtable.fd": 8,
  "file.f_inode": 32,
  "inode.i_mode": 0,
  "file.private_data": 24,
  "socket.sk": 24,
  "sock.__sk_common.skc_dport": 12,
  "sock.__sk_common.skc_family": 16,
  "sock.__sk_common.skc_state": 18,
  "sock.__sk_common.skc_v6_daddr": 56,
  "sock.__sk_common.skc_daddr": 0,
};
