"""The job's key layout in etcd (documented in docs/coordination.md).

Everything lives under one per-job prefix, e.g. ``/edl/<namespace>/<job>``:

- ``<prefix>/pservers/desired``  desired pserver count — configuration, **no lease**
- ``<prefix>/pservers/<i>``      ``host:port`` of pserver ``i`` — bound to its lease
- ``<prefix>/master/leader``     the leader lock; value = leader's ``host:port`` — leased
- ``<prefix>/state/...``         master's job state, written only through fenced txns
- ``<prefix>/<anything else>``   ``get_key``/``put_key`` (e.g. checkpoints metadata)
"""

from __future__ import annotations

DEFAULT_PREFIX = "/edl/default"


def job_prefix(namespace: str, job: str) -> str:
    """The conventional prefix for a job: ``/edl/<namespace>/<job>``."""
    return f"/edl/{namespace}/{job}"


def normalize_prefix(prefix: str) -> str:
    """``edl/x/`` -> ``/edl/x``: one leading slash, none trailing."""
    cleaned = "/" + prefix.strip().strip("/")
    if cleaned == "/":
        raise ValueError("the etcd key prefix must not be empty or '/'")
    return cleaned


def under(prefix: str, key: str) -> bytes:
    """A key relative to the job prefix, as etcd bytes."""
    relative = key.strip("/")
    if not relative:
        raise ValueError(f"empty etcd key {key!r}")
    return f"{prefix}/{relative}".encode()


def pservers_dir(prefix: str) -> bytes:
    return f"{prefix}/pservers/".encode()


def pserver_key(prefix: str, index: int) -> bytes:
    return f"{prefix}/pservers/{index}".encode()


def desired_pservers_key(prefix: str) -> bytes:
    return f"{prefix}/pservers/desired".encode()


def leader_key(prefix: str, name: str = "master") -> bytes:
    return f"{prefix}/{name}/leader".encode()


def parse_pserver_key(prefix: str, key: bytes) -> int | None:
    """The index in ``<prefix>/pservers/<i>``, or None for other keys (like ``desired``)."""
    tail = key.decode(errors="replace").removeprefix(f"{prefix}/pservers/")
    # isascii: str.isdigit() accepts "²", which int() rejects
    return int(tail) if tail.isascii() and tail.isdigit() else None


def range_end(prefix: bytes) -> bytes:
    """The etcd range end that covers every key starting with ``prefix``."""
    trimmed = bytearray(prefix)
    while trimmed:
        if trimmed[-1] < 0xFF:
            trimmed[-1] += 1
            return bytes(trimmed)
        trimmed.pop()
    return b"\0"


def lowest_free_index(taken: set[int], desired: int) -> int | None:
    """The smallest index in ``0..desired-1`` not in ``taken``, or None when all are taken."""
    for index in range(desired):
        if index not in taken:
            return index
    return None
