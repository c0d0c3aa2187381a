/*
 * probeCostLoop.c  The timed loops of `npm run bench` (agent/bench/probeCost.ts).
 *
 * The loops are C so that what changes between configurations is the kernel's
 * work per operation, not a runtime's. Each loop process is long-lived: the
 * benchmark starts it once, hands its pid to the agent as a target (or not),
 * and then asks it for one timed run per round by writing the iteration count
 * on its stdin. A run answers one line on stdout.
 *
 * USAGE (CPU: the CPU to run on, -1 for anywhere)
 *   probeCostLoop server CPU
 *       listens on 127.0.0.1 (ephemeral port), prints "listening PORT"; one
 *       forked reader per connection. It plays the apiserver: the benchmark
 *       configures 127.0.0.1:PORT as an apiserver endpoint.
 *   probeCostLoop send PORT CPU
 *       connects to 127.0.0.1:PORT, prints "ready". For each line N on stdin:
 *       N send()s of MSG_SIZE bytes, answers "WALL_NS CPU_NS RECV_CPU_NS
 *       RECV_VCSW RECV_IVCSW": ns per send by the wall clock and by the
 *       sending thread's CPU clock; the reader's CPU ns per recv of the same
 *       messages, and its voluntary and involuntary context switches per
 *       1000 recv (getrusage RUSAGE_THREAD around its timed loop).
 *   probeCostLoop file PATH CPU
 *       opens PATH, prints "ready". For each line N on stdin: N write()s of
 *       MSG_SIZE bytes from offset 0, answers "WALL_NS CPU_NS" per write.
 *
 * Both clocks, because this machine is shared: CLOCK_MONOTONIC is what the
 * caller waits, including time when another process had its CPU;
 * CLOCK_THREAD_CPUTIME_ID is the work done for it alone, which is where a
 * tracepoint's program runs (in the caller's context).
 *
 * The benchmark pins every loop and the server (so its readers) to one CPU.
 * A sender and its reader on different CPUs make every send wake the reader
 * by an inter-processor interrupt, or not, depending on which of the two is
 * ahead: that race, not the probes, would set the cost (3x swings measured).
 * On one CPU the reader drains in batches while the sender runs; the sender's
 * CPU ns per send is then steady within a few percent.
 *
 * Every run is preceded by an untimed warm-up of N/10 operations. Loop
 * processes ask the kernel to kill them when the benchmark dies
 * (PR_SET_PDEATHSIG), so an interrupted run leaves nothing behind.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* About the size of a small HTTP/2 frame; the probes' cost does not depend on it. */
#define MSG_SIZE 100

static void die(const char *what)
{
	fprintf(stderr, "probeCostLoop: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t now_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void send_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, buf, len, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("send");
		}
		buf += n;
		len -= (size_t)n;
	}
}

/* One message, whole: MSG_WAITALL makes every recv() return exactly MSG_SIZE bytes. */
static int recv_message(int fd, char *buf)
{
	ssize_t n;
	do {
		n = recv(fd, buf, MSG_SIZE, MSG_WAITALL);
	} while (n < 0 && errno == EINTR);
	return n == MSG_SIZE;
}

/*
 * Reader of one connection. Each run starts with a header message "RUN N W":
 * W warm-up messages are read untimed, then N messages are read with the
 * thread's CPU clock running (a blocked recv costs no CPU, so this is the
 * kernel's work per recv, not the wait for the sender), and the CPU ns per
 * recv goes back to the sender as one message, with the reader's context
 * switches per 1000 recv over the same loop: voluntary ones are the times it
 * blocked in recv() for want of data (so 1000 / voluntary is how many
 * messages it found queued per wake-up), involuntary ones the times it was
 * preempted. On one CPU the reader runs only when the sender is preempted
 * (measured: the sender's involuntary switches match the reader's voluntary
 * ones one for one, and the sender never blocks), so anything that changes
 * the sender's pace changes these, and with them the reader's CPU ns per recv
 * (each wake-up costs the reader's clock a fixed few microseconds), without
 * any probe on the receive path.
 */
static void serve_connection(int fd)
{
	char buf[MSG_SIZE];
	while (recv_message(fd, buf)) {
		unsigned long n = 0, warmup = 0;
		if (sscanf(buf, "RUN %lu %lu", &n, &warmup) != 2 || n == 0) {
			fprintf(stderr, "probeCostLoop: bad run header\n");
			exit(1);
		}
		for (unsigned long i = 0; i < warmup; i++)
			if (!recv_message(fd, buf))
				exit(1);
		struct rusage before, after;
		if (getrusage(RUSAGE_THREAD, &before) < 0)
			die("getrusage");
		uint64_t start = now_ns(CLOCK_THREAD_CPUTIME_ID);
		for (unsigned long i = 0; i < n; i++)
			if (!recv_message(fd, buf))
				exit(1);
		double per_recv = (double)(now_ns(CLOCK_THREAD_CPUTIME_ID) - start) / (double)n;
		if (getrusage(RUSAGE_THREAD, &after) < 0)
			die("getrusage");
		double vcsw = (double)(after.ru_nvcsw - before.ru_nvcsw) * 1000.0 / (double)n;
		double ivcsw = (double)(after.ru_nivcsw - before.ru_nivcsw) * 1000.0 / (double)n;
		memset(buf, 0, sizeof(buf));
		snprintf(buf, sizeof(buf), "%.1f %.2f %.2f", per_recv, vcsw, ivcsw);
		send_all(fd, buf, MSG_SIZE);
	}
	exit(0);
}

static _Noreturn void run_server(void)
{
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0)
		die("socket");
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = 0 };
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
		die("bind");
	if (listen(lfd, 16) < 0)
		die("listen");
	socklen_t len = sizeof(addr);
	if (getsockname(lfd, (struct sockaddr *)&addr, &len) < 0)
		die("getsockname");
	printf("listening %d\n", ntohs(addr.sin_port));
	fflush(stdout);
	signal(SIGCHLD, SIG_IGN); /* readers are reaped by the kernel */
	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			die("accept");
		}
		pid_t child = fork();
		if (child < 0)
			die("fork");
		if (child == 0) {
			close(lfd);
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			serve_connection(fd);
		}
		close(fd);
	}
}

static int run_send(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket");
	/* Go (client-go) sets TCP_NODELAY on every connection: each send is a segment. */
	int one = 1;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		die("setsockopt TCP_NODELAY");
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
		die("connect");
	printf("ready\n");
	fflush(stdout);

	char msg[MSG_SIZE];
	memset(msg, 'x', sizeof(msg));
	unsigned long n;
	while (scanf("%lu", &n) == 1 && n > 0) {
		unsigned long warmup = n / 10;
		char header[MSG_SIZE] = { 0 };
		snprintf(header, sizeof(header), "RUN %lu %lu", n, warmup);
		send_all(fd, header, MSG_SIZE);
		for (unsigned long i = 0; i < warmup; i++)
			send_all(fd, msg, MSG_SIZE);
		uint64_t start = now_ns(CLOCK_MONOTONIC);
		uint64_t start_cpu = now_ns(CLOCK_THREAD_CPUTIME_ID);
		for (unsigned long i = 0; i < n; i++)
			if (send(fd, msg, MSG_SIZE, 0) != MSG_SIZE)
				die("send (timed)");
		double cpu_per_send = (double)(now_ns(CLOCK_THREAD_CPUTIME_ID) - start_cpu) / (double)n;
		double per_send = (double)(now_ns(CLOCK_MONOTONIC) - start) / (double)n;
		char reply[MSG_SIZE];
		if (!recv_message(fd, reply))
			die("recv reply");
		reply[MSG_SIZE - 1] = 0;
		printf("%.1f %.1f %s\n", per_send, cpu_per_send, reply);
		fflush(stdout);
	}
	return 0;
}

static int run_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		die("open");
	printf("ready\n");
	fflush(stdout);

	char msg[MSG_SIZE];
	memset(msg, 'x', sizeof(msg));
	unsigned long n;
	while (scanf("%lu", &n) == 1 && n > 0) {
		/* From offset 0 every run: the file stays at N * MSG_SIZE bytes, in the page cache. */
		if (lseek(fd, 0, SEEK_SET) < 0)
			die("lseek");
		for (unsigned long i = 0; i < n / 10; i++)
			if (write(fd, msg, MSG_SIZE) != MSG_SIZE)
				die("write (warm-up)");
		if (lseek(fd, 0, SEEK_SET) < 0)
			die("lseek");
		uint64_t start = now_ns(CLOCK_MONOTONIC);
		uint64_t start_cpu = now_ns(CLOCK_THREAD_CPUTIME_ID);
		for (unsigned long i = 0; i < n; i++)
			if (write(fd, msg, MSG_SIZE) != MSG_SIZE)
				die("write (timed)");
		double cpu = (double)(now_ns(CLOCK_THREAD_CPUTIME_ID) - start_cpu) / (double)n;
		printf("%.1f %.1f\n", (double)(now_ns(CLOCK_MONOTONIC) - start) / (double)n, cpu);
		fflush(stdout);
	}
	return 0;
}

static void pin(const char *cpu_arg)
{
	int cpu = atoi(cpu_arg);
	if (cpu < 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		die("sched_setaffinity");
}

int main(int argc, char **argv)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (argc == 3 && strcmp(argv[1], "server") == 0) {
		pin(argv[2]);
		run_server();
	}
	if (argc == 4 && strcmp(argv[1], "send") == 0) {
		pin(argv[3]);
		return run_send(atoi(argv[2]));
	}
	if (argc == 4 && strcmp(argv[1], "file") == 0) {
		pin(argv[3]);
		return run_file(argv[2]);
	}
	fprintf(stderr, "usage: probeCostLoop server CPU | send PORT CPU | file PATH CPU\n");
	return 2;
}
