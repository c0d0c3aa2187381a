"""One status write over a fresh TLS connection, then exit: a one-shot script's shape.

Usage: lw_tls_oneshot.py PORT PATH

Connects to 127.0.0.1:PORT at once (TLS 1.3, the server's certificate not
checked), sends one status PATCH of about 1500 bytes, reads the answer if one
comes, and exits. No pause anywhere: a probe that is not attached by the time
the request goes out misses it. Prints one JSON line: {"status": 200, "sent": N}
or {"status": null, "error": "ConnectionResetError", "sent": N}, N the
request's plaintext bytes as handed to TLS.
"""
import http.client
import json
import ssl
import sys

port, path = int(sys.argv[1]), sys.argv[2]
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
conditions = [{"type": f"Condition{i}", "status": "True", "reason": "Reconciled", "message": "x" * 80} for i in range(12)]
body = json.dumps({"status": {"phase": "Ready", "conditions": conditions}}).encode()


class Counting(http.client.HTTPSConnection):
    sent = 0

    def send(self, data):
        self.sent += len(data)
        super().send(data)


conn = Counting("127.0.0.1", port, context=context, timeout=10)
try:
    conn.request("PATCH", path, body=body, headers={"Content-Type": "application/merge-patch+json"})
    response = conn.getresponse()
    response.read()
    print(json.dumps({"status": response.status, "sent": conn.sent}), flush=True)
except (OSError, http.client.HTTPException) as e:
    print(json.dumps({"status": None, "error": type(e).__name__, "sent": conn.sent}), flush=True)
