// The socket syscalls the probes report, by their x86_64 numbers (what the
// probe reads from pt_regs), and the label values they become.
export const SOCKET_SYSCALLS = { write: 1, writev: 20, connect: 42, sendto: 44, sendmsg: 46, sendmmsg: 307 } as const;
type SocketSyscall = keyof typeof SOCKET_SYSCALLS;

/** The `syscall` label's closed set: every reported syscall, and "unknown" when the kernel path does not say. */
export const SYSCALL_LABELS = [...(Object.keys(SOCKET_SYSCALLS) as SocketSyscall[]), "unknown"] as const;
type SyscallLabel = SocketSyscall | "unknown";

const BY_NUMBER = new Map<number, SocketSyscall>(Object.entries(SOCKET_SYSCALLS).map(([name, nr]) => [nr, name as SocketSyscall]));

export function syscallName(nr: number): SyscallLabel {
  return BY_NUMBER.get(nr) ?? "unknown";
}
