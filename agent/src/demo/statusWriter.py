"""The demo's status writer: a client that writes into dead connections.

Usage: statusWriter.py HOST PORT PATH

Stands in for a client-go-style client: HTTP/1.1 over TLS to the apiserver
on one keep-alive connection, and, unlike Node, it does not read a reset
before it writes again (Python's blocking sockets write straight into it).
It does nothing until told, one command per line on stdin, and answers one
JSON line per command on stdout:

  patch   send a status merge PATCH (300 bytes) to PATH and read the answer;
          when the connection dies instead, wait 400 ms and write the same
          request again into the dead connection (EPIPE or ECONNRESET)
  zero    send zero bytes on the live connection
  exit

The demo runs it under a symlinked name, so its kernel comm says what it is.
"""
import http.client
import json
import select
import socket
import ssl
import sys
import time

PATCH_BYTES = 300
# A client-go-style pause before writing again: the agent folds the failed
# write into the connection's death however late it comes.
WRITE_AGAIN_AFTER_S = 0.4


def report(step, **fields):
    print(json.dumps({"step": step, "t": time.time(), **fields}), flush=True)


def status_body():
    head = '{"status":{"phase":"Ready","message":"'
    tail = '"}}'
    return (head + "x" * (PATCH_BYTES - len(head) - len(tail)) + tail).encode()


def peer_state(sock):
    """'open', 'closed' or 'reset', without reading what TLS has not consumed."""
    # A socket with a timeout would first wait for it to become readable.
    timeout = sock.gettimeout()
    sock.settimeout(0)
    try:
        data = socket.socket.recv(sock, 1, socket.MSG_PEEK)
        return "open" if data else "closed"
    except BlockingIOError:
        return "open"
    except OSError:
        return "reset"
    finally:
        sock.settimeout(timeout)


class Writer:
    def __init__(self, host, port, path):
        self.host, self.port, self.path = host, port, path
        self.context = ssl.create_default_context()
        # The testbed's CA is made at every start; the demo is about TCP, not trust.
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE
        self.sock = None

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def live(self):
        """The keep-alive connection, reopened when the apiserver closed or reset it while idle."""
        if self.sock is not None and peer_state(self.sock) != "open":
            self.close()
        if self.sock is None:
            raw = socket.create_connection((self.host, self.port), timeout=10)
            self.sock = self.context.wrap_socket(raw, server_hostname="localhost")
        return self.sock

    def request_bytes(self):
        body = status_body()
        head = (
            f"PATCH {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Content-Type: application/merge-patch+json\r\nAuthorization: Bearer testbed\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    def patch(self):
        sock = self.live()
        request = self.request_bytes()
        # One send, one TLS record: the request reaches the kernel whole, so a
        # reset on its headers cannot catch a second send of its own body.
        sock.sendall(request)
        select.select([sock], [], [], 10)
        # Give a reset that follows the last request byte a moment to land.
        time.sleep(0.05)
        if peer_state(sock) == "open":
            response = http.client.HTTPResponse(sock, method="PATCH")
            response.begin()
            response.read()
            report("patch", status=response.status, sent=len(request))
            return
        # The connection died with the request unanswered: write into it again.
        time.sleep(WRITE_AGAIN_AFTER_S)
        try:
            sock.send(request)
            report("patch", status=None, write_again=None)
        except OSError as e:
            report("patch", status=None, write_again=type(e).__name__)
        self.close()

    def zero(self):
        sock = self.live()
        # Past TLS, straight to the kernel: send(fd, "", 0).
        sent = socket.socket.send(sock, b"")
        report("zero", sent=sent)


def main():
    writer = Writer(sys.argv[1], int(sys.argv[2]), sys.argv[3])
    report("ready")
    for line in sys.stdin:
        command = line.strip()
        try:
            if command == "patch":
                writer.patch()
            elif command == "zero":
                writer.zero()
            elif command == "exit":
                break
            elif command:
                report("unknown", command=command)
        except (OSError, http.client.HTTPException) as e:
            writer.close()
            report(command, error=type(e).__name__, errno=getattr(e, "errno", None))


if __name__ == "__main__":
    main()
