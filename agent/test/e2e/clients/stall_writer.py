"""A client whose apiserver stops reading: it connects, asks its kernel to
give up after TCP_USER_TIMEOUT and writes a request larger than the window.
Mode "send" goes on writing until a send fails; mode "read" writes until its
send buffer is full, then waits for the answer, so the kernel's error reaches
it through a read (which clears it). Mode "connect" is for an apiserver whose
SYNs are dropped: the connect sends its SYN twice (TCP_SYNCNT 1) and times
out. It prints one JSON line {"local": "ip:port", "sent": bytes accepted,
"errno": the failure} and keeps the dead socket open until its stdin closes.

usage: stall_writer.py send|read|connect HOST PORT USER_TIMEOUT_MS
"""
import json
import socket
import sys

TCP_USER_TIMEOUT = 18

mode, host, port, user_timeout_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "connect":
    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_SYNCNT, 1)
    try:
        sock.connect((host, port))
        errno = 0
    except OSError as error:
        errno = error.errno
    print(json.dumps({"local": "%s:%d" % sock.getsockname()[:2], "sent": 0, "errno": errno}), flush=True)
    sys.stdin.read()
    sys.exit(0)
sock = socket.create_connection((host, port))
sock.setsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT, user_timeout_ms)
local = "%s:%d" % sock.getsockname()[:2]
head = b"PATCH /apis/demo.lostwrite.dev/v1/namespaces/stalled/widgets/w1/status HTTP/1.1\r\nHost: apiserver\r\n\r\n"
chunk = head + b"x" * (65536 - len(head))
sent = 0
errno = None
if mode == "read":
    sock.setblocking(False)
    while True:
        try:
            sent += sock.send(chunk)
        except BlockingIOError:
            break
    sock.setblocking(True)
    try:
        sock.recv(1)
    except OSError as error:
        errno = error.errno
else:
    while errno is None:
        try:
            sent += sock.send(chunk)
        except OSError as error:
            errno = error.errno
print(json.dumps({"local": local, "sent": sent, "errno": errno}), flush=True)
sys.stdin.read()
