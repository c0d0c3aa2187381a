"""A short-lived apiserver client, like kubectl or a one-shot python script.

Usage: lw_short_lived.py PORT WRITE_AT_MS LIFE_MS [RESET|CLOSE]

Connects to 127.0.0.1:PORT at once and sends a status PATCH whose body tells
the test server what to do. RESET (default): the server resets the
connection; the client writes into the dead connection WRITE_AT_MS after
start. CLOSE: the server closes (FIN) without an answer; the client reads the
end of stream and closes too. Exits at LIFE_MS. Prints one JSON line: what
the kernel answered to the write into the dead connection (RESET), or what
the read got (CLOSE).
"""
import errno
import json
import select
import socket
import sys
import time

start = time.monotonic()
port, write_at, life = int(sys.argv[1]), int(sys.argv[2]) / 1000, int(sys.argv[3]) / 1000
fault = sys.argv[4] if len(sys.argv) > 4 else "RESET"
sock = socket.create_connection(("127.0.0.1", port))
sock.sendall(b"PATCH /apis/demo.lostwrite.dev/v1/namespaces/default/widgets/w1/status HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n" + fault.encode())
if fault == "CLOSE":
    got = sock.recv(4096)
    sock.close()
    print(json.dumps({"read": "eof" if got == b"" else "data"}), flush=True)
    time.sleep(max(0.0, life - (time.monotonic() - start)))
    sys.exit(0)
time.sleep(max(0.0, write_at - (time.monotonic() - start)))
# A loaded server may reset a little later: the write must meet the dead connection.
select.select([sock], [], [], 2.0)
result = None
try:
    sock.send(b"x" * 128)
except OSError as e:
    result = errno.errorcode.get(e.errno)
print(json.dumps({"write_errno": result, "wrote_at_ms": round((time.monotonic() - start) * 1000)}), flush=True)
time.sleep(max(0.0, life - (time.monotonic() - start)))
