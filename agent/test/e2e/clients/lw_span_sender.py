"""Test client that sends OTLP/HTTP bodies from its own process, and can lose a write.

An operator stand-in whose spans the agent must prove are its own: they
travel on this process's own keep-alive connection to the agent, as an SDK's
exporter's do. The test names the process by its comm (run it through a
symlink to python3 named as the test wants).

    lw_span_sender.py OTLP_HOST OTLP_PORT

Commands, one JSON object a line on stdin; one JSON line a result on stdout:
    {"cmd": "post", "contentType": "application/json", "body": "<text>"}
        -> {"step": "post", "status": 200, "text": "..."}
    {"cmd": "connect_api", "host": "127.0.0.1", "port": 6443}
        -> {"step": "connect_api"}
    {"cmd": "lose_write"}   a request the stand-in apiserver resets (RESET), then
                            a write into the dead connection (fails: EPIPE)
        -> {"step": "lose_write", "errno": "EPIPE"}
"""
import errno
import http.client
import json
import select
import socket
import sys
import time

TCP_CLOSE = 7
TCP_CLOSE_WAIT = 8


def report(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def wait_until_closed(sock, timeout_s=30.0):
    """Until the server's reset has reached the socket (TCP_INFO's state; the pending error stays)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] in (TCP_CLOSE, TCP_CLOSE_WAIT):
            return True
        select.select([sock], [], [], 0.01)
    return False


def main():
    otlp = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=10)
    api = None
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        if command["cmd"] == "post":
            otlp.request("POST", "/v1/traces", command["body"].encode(), {"content-type": command["contentType"]})
            response = otlp.getresponse()
            report("post", status=response.status, text=response.read().decode("utf-8", "replace"))
        elif command["cmd"] == "connect_api":
            api = socket.create_connection((command["host"], command["port"]))
            report("connect_api")
        elif command["cmd"] == "lose_write":
            api.send(b"PATCH /apis/demo.lostwrite.dev/v1/namespaces/widgets/widgets/w1/status HTTP/1.1\r\nX-Test: RESET\r\n\r\n")
            closed = wait_until_closed(api)
            result = None
            for _ in range(2):
                try:
                    api.send(b"more")
                except OSError as e:
                    result = result or errno.errorcode.get(e.errno)
            report("lose_write", errno=result, closed=closed)
        else:
            report("unknown", command=command["cmd"])


if __name__ == "__main__":
    main()
