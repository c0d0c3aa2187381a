// lostwrite-pageout asks the kernel to page out ranges of another process's
// memory: process_madvise(2) with MADV_PAGEOUT, which Node cannot call. The
// agent runs it on each bpftrace it started once its program is attached, with
// the ranges of the compiler's code (LLVM, clang) that bpftrace mapped to
// compile and never runs again; the agent picks the ranges, this only asks.
//
//	lostwrite-pageout <pid> <start>-<end> [<start>-<end> ...]
//
// Ranges are hexadecimal, as /proc/<pid>/maps writes them. The kernel skips
// what it cannot page out (pages another process maps too, anonymous memory
// without swap), so a range of the wrong process costs that process page
// faults, never data. Needs CAP_SYS_NICE, and ptrace read access to <pid>.
// Exits 0 when every range was advised; otherwise prints why and exits 1,
// 2 for a usage error, 3 when not permitted (EPERM: no CAP_SYS_NICE, or a
// seccomp profile that refuses the call), which will not change while the
// caller runs.
package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// The same numbers on every architecture that uses the generic syscall table
// and on x86_64 (both were added after the tables were unified).
const (
	sysPidfdOpen      = 434
	sysProcessMadvise = 440
	madvPageout       = 21
	// UIO_MAXIOV: process_madvise takes at most this many ranges per call.
	maxRangesPerCall = 1024
)

// struct iovec, with the base as a number: the addresses are the other
// process's, nothing this one could point at.
type iovec struct {
	base uintptr
	len  uintptr
}

func main() {
	pid, ranges, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "lostwrite-pageout: %v\nusage: lostwrite-pageout <pid> <start>-<end> [<start>-<end> ...]\n", err)
		os.Exit(2)
	}
	if err := pageOut(pid, ranges); err != nil {
		fmt.Fprintf(os.Stderr, "lostwrite-pageout: pid %d: %v\n", pid, err)
		if errors.Is(err, syscall.EPERM) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

func parseArgs(args []string) (int, []iovec, error) {
	if len(args) < 2 {
		return 0, nil, fmt.Errorf("want a pid and at least one range, got %d arguments", len(args))
	}
	pid, err := strconv.Atoi(args[0])
	if err != nil || pid <= 0 {
		return 0, nil, fmt.Errorf("pid %q is not a positive integer", args[0])
	}
	ranges := make([]iovec, 0, len(args)-1)
	for _, arg := range args[1:] {
		start, end, ok := strings.Cut(arg, "-")
		from, errFrom := strconv.ParseUint(start, 16, 64)
		to, errTo := strconv.ParseUint(end, 16, 64)
		if !ok || errFrom != nil || errTo != nil || to <= from {
			return 0, nil, fmt.Errorf("range %q is not <start>-<end> in hexadecimal with start < end", arg)
		}
		ranges = append(ranges, iovec{base: uintptr(from), len: uintptr(to - from)})
	}
	return pid, ranges, nil
}

func pageOut(pid int, ranges []iovec) error {
	// A pidfd names this process for as long as it is open, even if the pid is
	// reused meanwhile.
	pidfd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno != 0 {
		return fmt.Errorf("pidfd_open: %w", errno)
	}
	defer syscall.Close(int(pidfd))
	for len(ranges) > 0 {
		batch := ranges[:min(len(ranges), maxRangesPerCall)]
		ranges = ranges[len(batch):]
		_, _, errno := syscall.Syscall6(sysProcessMadvise, pidfd, uintptr(unsafe.Pointer(&batch[0])), uintptr(len(batch)), madvPageout, 0, 0)
		if errno == syscall.EPERM {
			return fmt.Errorf("process_madvise: %w (needs CAP_SYS_NICE)", errno)
		}
		if errno != 0 {
			return fmt.Errorf("process_madvise: %w", errno)
		}
	}
	return nil
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}
