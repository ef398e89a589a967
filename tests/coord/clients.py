"""One way to build the EtcdClient under test (each test module fixes its prefix and TTL)."""

from __future__ import annotations

from typing import Any

from edl.coord import EtcdClient
from edl.coord.embedded import EmbeddedEtcd

DIAL_TIMEOUT_S = 5.0


def etcd_client(
    etcd: EmbeddedEtcd, desired: int = 1, *, prefix: str, ttl: int, **options: Any
) -> EtcdClient:
    """A client of ``etcd`` for a job of ``desired`` pservers under ``prefix``."""
    return EtcdClient(etcd.endpoints, desired, DIAL_TIMEOUT_S, ttl, prefix=prefix, **options)
