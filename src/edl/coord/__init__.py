"""Coordination through a real etcd: pserver registration, discovery, master election.

Modules: ``embedded`` (a real etcd server process), ``endpoints`` (parsing),
``client`` (``EtcdClient``: leases, registration, keys), ``discovery`` (pserver list
and watch), ``follow`` (the list-then-watch loop), ``election`` (leader lock and
fenced writes).
"""

from edl.coord.client import EtcdClient
from edl.coord.election import Election, FencedStore, leader_address, watch_leader
from edl.coord.embedded import EmbeddedEtcd
from edl.coord.errors import (
    CoordError,
    EndpointError,
    EtcdConfigError,
    EtcdRequestError,
    EtcdUnavailableError,
    IndexUnavailableError,
    LeaseLostError,
    NotLeaderError,
    NotRegisteredError,
)
from edl.coord.keys import job_prefix

__all__ = [
    "CoordError",
    "Election",
    "EmbeddedEtcd",
    "EndpointError",
    "EtcdClient",
    "EtcdConfigError",
    "EtcdRequestError",
    "EtcdUnavailableError",
    "FencedStore",
    "IndexUnavailableError",
    "LeaseLostError",
    "NotLeaderError",
    "NotRegisteredError",
    "job_prefix",
    "leader_address",
    "watch_leader",
]
