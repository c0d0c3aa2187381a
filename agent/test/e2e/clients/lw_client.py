"""Test client for the real-kernel e2e tests: one failure mode per invocation.

Prints one JSON line per outcome on stdout ({"step": ..., "errno": ...}) so the
test knows what the kernel did from the client's side. Python's blocking
sockets write into a reset connection (Node's net.Socket would notice the reset
on read first), which is what a failing write needs.
"""
import errno
import json
import os
import select
import socket
import ssl
import sys
import time


def report(step, err=None, **extra):
    print(json.dumps({"step": step, "errno": errno.errorcode.get(err) if err else None, "t": time.time(), **extra}), flush=True)


TCP_CLOSE = 7
TCP_CLOSE_WAIT = 8


def wait_until_closed(sock, timeout_s=30.0):
    """Blocks until the server's reset (or FIN) has reached this socket.

    Reads the kernel's TCP state (TCP_INFO's first byte), which leaves the
    socket's pending error alone: the next send still reports it. A fixed
    sleep instead would be outrun by a slow machine, and the send meant to hit
    a dead connection would go out on a live one.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
        if state in (TCP_CLOSE, TCP_CLOSE_WAIT):
            return
        select.select([sock], [], [], 0.01)
    report("still_open_after", None, seconds=timeout_s)


def try_send(sock, data, step, use_write=False):
    try:
        if use_write:
            n = sock.write(data)
        else:
            n = sock.send(data)
        report(step, None, sent=n)
    except OSError as e:
        report(step, e.errno)


def tls_reset(host, port):
    """TLS request to a server that reads it and resets; then write again."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    raw = socket.create_connection((host, port))
    tls = ctx.wrap_socket(raw, server_hostname="localhost")
    # The test server is OpenSSL's: its TLS 1.3 session tickets follow the
    # handshake. Sent after them, the request is judged on its own (sent before,
    # they would look like its answer: the known limit in apiserver_sockets.bt).
    time.sleep(0.1)
    tls.sendall(b"PATCH /apis/demo.lostwrite.dev/v1/namespaces/default/widgets/w1/status HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    wait_until_closed(tls)
    for i in range(2):
        try_send(tls, b"GET / HTTP/1.1\r\n\r\n", "tls_write_after_reset")


def plain_reset(host, port):
    """Plain TCP: send, the server resets, send again with sendto."""
    s = socket.create_connection((host, port))
    s.send(b"PATCH /status HTTP/1.1\r\nX-Test: RESET\r\n\r\n")
    wait_until_closed(s)
    for i in range(2):
        try_send(s, b"more", "sendto_after_reset")


def refused(host, port):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        s.connect((host, port))
        report("connect", None)
    except OSError as e:
        report("connect", e.errno)


def zero(host, port):
    s = socket.create_connection((host, port))
    try_send(s, b"", "zero_send")
    os.write(1, b"")  # a zero-byte write to stdout: not a socket, never a loss
    report("zero_stdout")
    time.sleep(0.2)


def eagain(host, port):
    """Fill a non-blocking socket until EAGAIN, then write once it drains."""
    s = socket.create_connection((host, port))
    s.setblocking(False)
    chunk = b"x" * 65536
    hit = False
    sent = 0
    for _ in range(10000):
        try:
            sent += s.send(chunk)
        except BlockingIOError:
            hit = True
            break
    report("eagain", errno.EAGAIN if hit else None, sent=sent)
    select.select([], [s], [], 10)
    s.setblocking(True)
    try_send(s, b"END", "write_after_drain")
    # Read the answer before closing: a connection closed with its request
    # unanswered would be a loss of its own.
    got = b""
    while b"answered" not in got:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    report("answered" if b"answered" in got else "not_answered")


def wait_then_reset(host, port):
    """Connects now, waits for a line on stdin (the agent starts meanwhile), then writes into a reset."""
    s = socket.create_connection((host, port))
    s.send(b"PATCH /status HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
    report("connected")
    sys.stdin.readline()
    # A request of realistic size: small sends are protocol chatter to the agent.
    s.send(b"PATCH /apis/demo.lostwrite.dev/v1/namespaces/default/widgets/w1/status HTTP/1.1\r\nX-Test: RESET\r\n\r\n")
    wait_until_closed(s)
    try_send(s, b"more", "preexisting_after_reset")


def flood(host, port, rate=25000, seconds=30.0):
    """A request the server resets, then sends into the dead socket at `rate`/s for `seconds`.

    What a client that retries in a tight loop does to the agent. Sends go in
    batches of rate/100 every 10 ms, so the rate holds without a busy core.
    Reports every failure it saw, by errno: the count the agent must match.
    """
    s = socket.create_connection((host, port))
    # A request of realistic size (at least 64 bytes), so the reset is a loss.
    s.send(b"PATCH /apis/demo.lostwrite.dev/v1/namespaces/default/widgets/w1/status HTTP/1.1\r\nX-Test: RESET\r\n\r\n")
    wait_until_closed(s)
    counts = {}
    batch = rate // 100
    started = time.monotonic()
    tick = started
    while tick - started < seconds:
        for _ in range(batch):
            try:
                s.send(b"x")
                counts["sent"] = counts.get("sent", 0) + 1
            except OSError as e:
                name = errno.errorcode.get(e.errno, str(e.errno))
                counts[name] = counts.get(name, 0) + 1
        tick += 0.01
        delay = tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    report("flood", None, counts=counts, seconds=time.monotonic() - started)


def fresh_tls(host, port, version, action):
    """A status PATCH as the first request on a new TLS connection, right after the handshake.

    The server reads it and resets or closes without answering (its path says
    which). No pause between handshake and request: what a client that opens a
    connection to write status does.
    """
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3 if version == "1.3" else ssl.TLSVersion.TLSv1_2
    tls = ctx.wrap_socket(socket.create_connection((host, port)), server_hostname="localhost")
    body = b'{"status":{"phase":"Ready","message":"' + b"x" * 300 + b'"}}'
    tls.sendall(f"PATCH /apis/demo.lostwrite.dev/v1/namespaces/{action}/widgets/w1/status HTTP/1.1\r\nHost: localhost\r\n"
                f"Content-Type: application/merge-patch+json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    try:
        got = len(tls.recv(65536))
        report("fresh_tls", None, tls=tls.version(), read=got)
    except OSError as e:
        report("fresh_tls", e.errno, tls=tls.version())
    tls.close()


MODES = {"flood": flood, "fresh_tls": fresh_tls, "tls_reset": tls_reset, "plain_reset": plain_reset, "refused": refused, "zero": zero, "eagain": eagain, "wait_then_reset": wait_then_reset}

if __name__ == "__main__":
    if sys.argv[1] != "wait_then_reset":
        sys.stdin.readline()  # the test says go once the agent watches this process
    MODES[sys.argv[1]](sys.argv[2], int(sys.argv[3]), *sys.argv[4:])
