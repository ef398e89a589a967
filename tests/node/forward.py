"""Byte pipes between the machine's loopback and the test node's network namespace, so that
neither side needs an address on the machine's own interfaces:

* `--listen PORT --to HOST:PORT`: a TCP listener inside the node's namespace (the kubelet,
  kube-proxy and pods reach the API server at the node IP or 127.0.0.1 there) whose
  connections are dialled on the machine's loopback;
* `--connect-uds PATH`: an HTTP CONNECT proxy on a unix socket that dials inside the node's
  namespace: kube-apiserver's egress selector (`cluster` traffic: logs, exec, the kubelet's
  port 10250) goes through it.

Run as `python forward.py --netns /proc/<pid>/ns/net ...` (stdlib only); it exits on SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import socket
import threading
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
T = TypeVar("T")


def in_netns(netns: str, make: Callable[[], T]) -> T:
    """Call `make` with this thread in `netns` (a socket keeps the namespace it was made in)."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {netns}")
        try:
            return make()
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(own)
        os.close(target)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _splice(a: socket.socket, b: socket.socket) -> None:
    other = threading.Thread(target=_pump, args=(b, a), daemon=True)
    other.start()
    _pump(a, b)
    other.join()
    a.close()
    b.close()


def _serve(server: socket.socket, handle: Callable[[socket.socket], None]) -> None:
    while True:
        conn, _ = server.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def tcp_into_loopback(netns: str, port: int, target: tuple[str, int]) -> threading.Thread:
    def listen() -> socket.socket:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", port))
        server.listen(128)
        return server

    def handle(conn: socket.socket) -> None:
        try:
            upstream = socket.create_connection(target, timeout=10)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)
        _splice(conn, upstream)

    server = in_netns(netns, listen)
    thread = threading.Thread(target=_serve, args=(server, handle), daemon=True)
    thread.start()
    return thread


def connect_proxy(netns: str, path: str) -> threading.Thread:
    def handle(conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 8192:
            chunk = conn.recv(4096)
            if not chunk:
                conn.close()
                return
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode(errors="replace").split()
        if len(line) < 2 or line[0] != "CONNECT":
            conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            conn.close()
            return
        host, _, port = line[1].rpartition(":")
        try:
            upstream = in_netns(netns, lambda: socket.create_connection(
                (host.strip("[]"), int(port)), timeout=10))
        except (OSError, ValueError) as error:
            conn.sendall(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{error}".encode())
            conn.close()
            return
        upstream.settimeout(None)
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        rest = head.split(b"\r\n\r\n", 1)[1]
        if rest:
            upstream.sendall(rest)
        _splice(conn, upstream)

    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(128)
    thread = threading.Thread(target=_serve, args=(server, handle), daemon=True)
    thread.start()
    return thread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--netns", required=True)
    parser.add_argument("--listen", type=int, action="append", default=[])
    parser.add_argument("--to", action="append", default=[])
    parser.add_argument("--connect-uds")
    args = parser.parse_args()
    threads = []
    for port, target in zip(args.listen, args.to, strict=True):
        host, _, target_port = target.rpartition(":")
        threads.append(tcp_into_loopback(args.netns, port, (host, int(target_port))))
    if args.connect_uds:
        threads.append(connect_proxy(args.netns, args.connect_uds))
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
