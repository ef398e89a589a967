"""Process and port helpers shared by everything that starts a child process or a server
on this machine: the embedded etcd, local pods, the trainer wrapper."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket

LOOPBACK = "127.0.0.1"
_PR_SET_PDEATHSIG = 1

try:
    # Loaded once here, not in the child: dlopen between fork and exec can deadlock
    # when the parent has other threads (gRPC, asyncio.to_thread) holding loader locks.
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def die_with_parent() -> None:
    """A ``preexec_fn``: the kernel SIGKILLs the child when the thread that spawned it dies,
    so no child outlives a killed owner."""
    if _LIBC is None:  # not Linux: atexit and the process group still apply
        return
    with contextlib.suppress(AttributeError):  # a libc without prctl (not Linux)
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that is free right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = LOOPBACK, *, reuse_address: bool = False) -> bool:
    """True if ``host:port`` can be bound right now by a server that binds as asked.

    ``reuse_address`` True checks as a server with SO_REUSEADDR binds (etcd, any Go
    server): only a listener makes the port busy. False checks for any server: a
    port still in TIME_WAIT counts as busy too.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if reuse_address:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
