#!/bin/sh
# Runs inside the VM (virtme-ng's init starts it as root): readies what the
# agent needs of a node, then runs the command the host wrote into the
# scratch directory, and writes its output and exit code back there (a
# read-write 9p mount of the host's directory). The host reads the files, not
# the console, so nothing depends on the console's path through qemu.
#   guest.sh SCRATCH
scratch=$1
: >"$scratch/started"
{
	# virtme-ng mounts both on the kernels tried; a kernel or init that does not still gets them.
	[ -d /sys/kernel/tracing/events ] || mount -t tracefs nodev /sys/kernel/tracing
	[ -d /sys/kernel/debug/tracing ] || mount -t debugfs nodev /sys/kernel/debug 2>/dev/null
	ip link set lo up
	# Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK.
	ulimit -l unlimited
	echo "guest: kernel $(uname -r), up $(cut -d' ' -f1 /proc/uptime) s, $(nproc) CPUs, $(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo) MiB"
} >"$scratch/output" 2>&1
sh "$scratch/command.sh" >>"$scratch/output" 2>&1
echo $? >"$scratch/exit-code"
