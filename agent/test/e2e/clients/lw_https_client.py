"""HTTPS keep-alive client for the connection-death e2e tests.

Usage: lw_https_client.py HOST PORT TIMEOUT_SECONDS

Speaks HTTP/1.1 over TLS to the testbed apiserver on ONE keep-alive
connection, like an operator's long-lived client connection. It does nothing
until told: the test sends one command per line on stdin (so the agent can be
watching this process before its first byte goes out) and reads one JSON line
per command on stdout:

  connect                       open the TCP + TLS connection
  request METHOD PATH BODY_LEN  send a request with a JSON body of BODY_LEN
                                bytes (0: none) and read the whole answer
  request_retransmitted M P LEN the same, but the kernel must retransmit the
                                request (see request() below)
  user_timeout MS               set TCP_USER_TIMEOUT on the connection
  close                         close the connection (idle, from this side)
  wait_eof                      wait until the server closes or resets the
                                connection, read once, then close
  span HOST PORT                send one OTLP/JSON span of this process (its
                                own pid as process.pid, as an SDK's resource
                                says) to an agent's OTLP/HTTP intake, from
                                this process: only its own spans count as its
  exit

Each answer carries what the kernel and TLS did from the client's side:
`sent` is the plaintext bytes handed to TLS for the request and `records` the
TLS records they went out in (one per send() below 16 KiB), so the test can
work out the bytes on the wire.
"""
import fcntl
import http.client
import json
import os
import select
import socket
import struct
import termios
import ssl
import sys
import time


class CountingConnection(http.client.HTTPSConnection):
    """Counts what http.client hands to the TLS socket for each request."""

    sent = 0
    records = 0

    def send(self, data):
        self.sent += len(data)
        self.records += 1
        super().send(data)


def report(step, **fields):
    print(json.dumps({"step": step, "t": time.time(), **fields}), flush=True)


def error_fields(e):
    return {"error": type(e).__name__, "errno": getattr(e, "errno", None)}


def status_body(size):
    """A status merge patch padded to exactly `size` bytes."""
    head = '{"status":{"phase":"Ready","observedGeneration":1,"message":"'
    tail = '"}}'
    return (head + "x" * max(0, size - len(head) - len(tail)) + tail).encode()[:size] if size else None


# linux/tcp.h: repair mode lets a socket queue data as sent without sending it.
TCP_REPAIR = 19
TCP_REPAIR_QUEUE = 20
TCP_SEND_QUEUE = 2
TCP_REPAIR_ON = 1
TCP_REPAIR_OFF_NO_WP = -1


def request(conn, method, path, body_len, withhold=False):
    """Sends one request and reads the whole answer.

    With `withhold`, the request's first transmission never leaves the host:
    TCP repair mode (CAP_NET_ADMIN) puts it in the send queue as if sent, so
    the kernel has to retransmit it when the retransmission timer fires
    (~200 ms on loopback). A real loss on loopback, with no packet filter.
    """
    body = status_body(body_len)
    headers = {"Content-Type": "application/merge-patch+json", "Authorization": "Bearer testbed"}
    conn.sent = conn.records = 0
    started = time.monotonic()
    try:
        if withhold:
            conn.sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, TCP_REPAIR_ON)
            conn.sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, TCP_SEND_QUEUE)
        conn.request(method, path, body=body, headers=headers)
        if withhold:
            conn.sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, TCP_REPAIR_OFF_NO_WP)
        response = conn.getresponse()
        response.read()
        local = conn.sock.getsockname()
        report("request", status=response.status, sent=conn.sent, records=conn.records,
               elapsed_ms=(time.monotonic() - started) * 1000, local=f"{local[0]}:{local[1]}")
    except (OSError, http.client.HTTPException) as e:
        # http.client has closed the socket already (getresponse closes on error).
        conn.close()
        report("request", status=None, sent=conn.sent, records=conn.records,
               elapsed_ms=(time.monotonic() - started) * 1000, **error_fields(e))


def send_span(host, port):
    now = time.time_ns()
    body = {"resourceSpans": [{
        "resource": {"attributes": [{"key": "process.pid", "value": {"intValue": str(os.getpid())}},
                                    {"key": "service.name", "value": {"stringValue": "traced"}}]},
        "scopeSpans": [{"spans": [{"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",
                                   "name": "housekeeping", "kind": 1,
                                   "startTimeUnixNano": str(now - 1_000_000), "endTimeUnixNano": str(now)}]}],
    }]}
    otlp = http.client.HTTPConnection(host, port, timeout=10)
    otlp.request("POST", "/v1/traces", json.dumps(body).encode(), {"content-type": "application/json"})
    response = otlp.getresponse()
    report("span", status=response.status, text=response.read().decode("utf-8", "replace"))
    otlp.close()


def main():
    host, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    context = ssl.create_default_context()
    # The testbed's CA is made at every start; the tests are about TCP, not trust.
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = None
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        command = words[0]
        if command == "connect":
            conn = CountingConnection(host, port, timeout=timeout, context=context)
            conn.connect()
            local = conn.sock.getsockname()
            # What the server sent after the handshake (TLS 1.3 session tickets)
            # and this client has not read yet: it reads only after a request.
            time.sleep(0.1)
            pending = struct.unpack("i", fcntl.ioctl(conn.sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
            report("connect", local=f"{local[0]}:{local[1]}", tls=conn.sock.version(), cipher=conn.sock.cipher()[0],
                   unread=pending)
        elif command in ("request", "request_retransmitted"):
            request(conn, words[1], words[2], int(words[3]), withhold=command == "request_retransmitted")
        elif command == "user_timeout":
            # The kernel aborts the connection (ETIMEDOUT) once sent data has
            # waited this long for an ACK or a window (TCP_USER_TIMEOUT = 18).
            conn.sock.setsockopt(socket.IPPROTO_TCP, 18, int(words[1]))
            report("user_timeout")
        elif command == "close":
            conn.close()
            report("close")
        elif command == "wait_eof":
            raw = conn.sock
            readable, _, _ = select.select([raw], [], [], 10)
            fields = {"readable": bool(readable)}
            try:
                fields["read"] = len(raw.recv(1))
            except (OSError, ssl.SSLError) as e:
                fields.update(error_fields(e))
            conn.close()
            report("wait_eof", **fields)
        elif command == "span":
            send_span(words[1], int(words[2]))
        elif command == "exit":
            break
        else:
            report("unknown", command=command)


if __name__ == "__main__":
    main()
