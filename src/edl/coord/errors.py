"""Errors of the coordination layer: each says what failed and where, in one line."""

from __future__ import annotations


class CoordError(Exception):
    """Base of every edl.coord error."""


class EndpointError(CoordError, ValueError):
    """An etcd endpoint string is malformed (names every bad item)."""


class EtcdConfigError(CoordError, ValueError):
    """A setting etcd cannot honour (e.g. a lease TTL below etcd's minimum)."""


class EtcdUnavailableError(CoordError):
    """No etcd endpoint answered within the timeout."""


class EtcdRequestError(CoordError):
    """etcd answered but refused the request (invalid argument, too many ops...)."""


class LeaseLostError(CoordError):
    """The lease that backs this process's keys expired or was revoked."""


class NotRegisteredError(LeaseLostError):
    """A fenced write was rejected: this process no longer holds its pserver index."""


class NotLeaderError(CoordError):
    """A fenced write was rejected: this process no longer holds the leader lock."""


class IndexUnavailableError(CoordError):
    """Every pserver index below the desired count stayed taken until the timeout."""
