"""An apiserver address whose SYNs are dropped, on loopback: a listener that
never accepts, with a backlog of 0 and its one place taken, so the kernel
drops every further SYN (its accept queue is full) and a client's connect
times out. Prints the port, then holds everything until stdin closes.

usage: syn_blackhole.py
"""
import socket
import sys

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(0)
port = listener.getsockname()[1]
# Backlog 0 holds one connection: this one fills it.
filler = socket.create_connection(("127.0.0.1", port))
print(port, flush=True)
sys.stdin.read()
