"""gRPC transport to etcd over aetcd's generated stubs, with what aetcd 1.0 lacks.

aetcd 1.0's ``Client`` talks to one ``host:port``, has one timeout for every call,
refreshes leases with a one-shot stream only, and cannot compare on a key's lease
in a txn.  So this module keeps aetcd's protobuf messages and stubs (``aetcd.rpc``)
and adds: several endpoints with fail-over, a deadline per call, fast reconnect
after an etcd restart (short gRPC back-off), lease keep-alive, a resumable watch,
and errors mapped to ``edl.coord.errors``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from aetcd import rpc

from edl.coord.endpoints import Endpoint, parse_endpoints
from edl.coord.errors import CoordError, EtcdRequestError, EtcdUnavailableError
from edl.coord.keys import range_end

# Reconnect quickly after an etcd restart instead of gRPC's default back-off (up to 120 s).
_CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # Pings find a dead etcd under a long watch; etcd allows one per 5 s, and only
    # while a stream is open (so no pings without calls, or etcd sends GOAWAY).
    ("grpc.keepalive_time_ms", 10000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 0),
]
# CANCELLED comes from a channel closed under a call (fail-over), not from etcd.
_RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
}


def _is_unavailable(error: grpc.aio.AioRpcError) -> bool:
    return error.code() in _RETRYABLE


class EtcdTransport:
    """Channels to an etcd cluster; calls go to the current endpoint, fail over on error."""

    def __init__(self, endpoints: str) -> None:
        self.endpoints: list[Endpoint] = parse_endpoints(endpoints)
        self._current = 0
        self._channel: grpc.aio.Channel | None = None
        self._retired: list[grpc.aio.Channel] = []
        self._closed = False

    @property
    def endpoint(self) -> Endpoint:
        return self.endpoints[self._current]

    def describe(self) -> str:
        return ",".join(e.url for e in self.endpoints)

    def _open(self) -> grpc.aio.Channel:
        if self._closed:
            raise CoordError("etcd transport is closed")
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(
                self.endpoint.target, options=_CHANNEL_OPTIONS
            )
        return self._channel

    async def _rotate(self) -> None:
        """Move to the next endpoint (only when there is more than one).

        The old channel is closed only in ``close()``: closing it now would cancel
        other calls still running on it (a lease renewal, a watch).
        """
        if len(self.endpoints) < 2:
            return
        channel, self._channel = self._channel, None
        self._current = (self._current + 1) % len(self.endpoints)
        if channel is not None:
            self._retired.append(channel)

    async def close(self) -> None:
        self._closed = True
        channels = [self._channel, *self._retired]
        self._channel, self._retired = None, []
        for channel in channels:
            if channel is not None:
                await channel.close()

    # -- unary calls ---------------------------------------------------------
    async def call(
        self,
        stub_type: Callable[[grpc.aio.Channel], Any],
        method: str,
        request: Any,
        timeout: float,
    ) -> Any:
        """One unary RPC with a deadline; tries each endpoint once on unavailability."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last: grpc.aio.AioRpcError | None = None
        for _ in range(len(self.endpoints)):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            stub = stub_type(self._open())
            try:
                return await getattr(stub, method)(request, timeout=remaining)
            except grpc.aio.AioRpcError as error:
                if not _is_unavailable(error):
                    raise EtcdRequestError(f"etcd {method}: {error.details()}") from None
                last = error
                await self._rotate()
        detail = last.details() if last is not None else "no time left"
        raise EtcdUnavailableError(
            f"etcd at {self.describe()} unavailable within {timeout:.1f} s: {detail}"
        ) from None

    async def range(self, key: bytes, timeout: float, *, prefix: bool = False) -> Any:
        request = rpc.RangeRequest(key=key, range_end=range_end(key) if prefix else b"")
        return await self.call(rpc.KVStub, "Range", request, timeout)

    async def put(self, key: bytes, value: bytes, timeout: float, lease: int = 0) -> Any:
        request = rpc.PutRequest(key=key, value=value, lease=lease)
        return await self.call(rpc.KVStub, "Put", request, timeout)

    async def txn(
        self, compare: list[Any], success: list[Any], failure: list[Any], timeout: float
    ) -> Any:
        request = rpc.TxnRequest(compare=compare, success=success, failure=failure)
        return await self.call(rpc.KVStub, "Txn", request, timeout)

    async def grant(self, ttl: int, timeout: float) -> Any:
        return await self.call(rpc.LeaseStub, "LeaseGrant", rpc.LeaseGrantRequest(TTL=ttl), timeout)

    async def revoke(self, lease_id: int, timeout: float) -> None:
        """Revoke a lease; a lease that is already gone counts as revoked."""
        try:
            await self.call(
                rpc.LeaseStub, "LeaseRevoke", rpc.LeaseRevokeRequest(ID=lease_id), timeout
            )
        except EtcdRequestError as error:
            if "not found" not in str(error):
                raise

    async def keepalive_once(self, lease_id: int, timeout: float) -> int:
        """Renew a lease once; returns the TTL etcd granted (0: the lease is gone)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        stub = rpc.LeaseStub(self._open())
        try:
            call = stub.LeaseKeepAlive(
                iter([rpc.LeaseKeepAliveRequest(ID=lease_id)]),
                timeout=max(0.01, deadline - loop.time()),
            )
            async for response in call:
                call.cancel()
                return int(response.TTL)
        except grpc.aio.AioRpcError as error:
            if _is_unavailable(error):
                await self._rotate()
                raise EtcdUnavailableError(f"etcd keep-alive: {error.details()}") from None
            raise EtcdRequestError(f"etcd keep-alive: {error.details()}") from None
        raise EtcdUnavailableError("etcd keep-alive stream ended without an answer")

    # -- watch ---------------------------------------------------------------
    async def watch(
        self, key: bytes, start_revision: int, *, prefix: bool = False
    ) -> AsyncIterator[tuple[int, list[Any]]]:
        """Yield ``(revision, events)`` for ``key`` (or the prefix) from ``start_revision``.

        Raises EtcdUnavailableError when the stream breaks (the caller re-lists and
        resumes) and EtcdRequestError when the revision was compacted.
        """
        create = rpc.WatchRequest(
            create_request=rpc.WatchCreateRequest(
                key=key,
                range_end=range_end(key) if prefix else b"",
                start_revision=start_revision,
                progress_notify=True,
            )
        )
        stop = asyncio.Event()

        async def requests() -> AsyncIterator[Any]:
            yield create
            await stop.wait()

        call = rpc.WatchStub(self._open()).Watch(requests())
        try:
            async for response in call:
                if response.compact_revision:
                    raise EtcdRequestError(
                        f"etcd watch: revision {start_revision} compacted "
                        f"(now {response.compact_revision})"
                    )
                if response.canceled:
                    raise EtcdUnavailableError(f"etcd watch canceled: {response.cancel_reason}")
                if response.events:
                    yield response.header.revision, list(response.events)
            raise EtcdUnavailableError("etcd watch stream ended")
        except grpc.aio.AioRpcError as error:
            if _is_unavailable(error):
                await self._rotate()
                raise EtcdUnavailableError(f"etcd watch: {error.details()}") from None
            raise EtcdRequestError(f"etcd watch: {error.details()}") from None
        finally:
            stop.set()
            call.cancel()


def compare_create(key: bytes, revision: int) -> Any:
    """Txn condition: ``key``'s create_revision equals ``revision`` (0: key absent)."""
    return rpc.Compare(
        key=key, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=revision
    )


def compare_lease(key: bytes, lease_id: int) -> Any:
    """Txn condition: ``key`` is bound to ``lease_id``."""
    return rpc.Compare(key=key, target=rpc.Compare.LEASE, result=rpc.Compare.EQUAL, lease=lease_id)


def op_put(key: bytes, value: bytes, lease: int = 0) -> Any:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=lease))


def op_get(key: bytes, *, prefix: bool = False) -> Any:
    return rpc.RequestOp(
        request_range=rpc.RangeRequest(key=key, range_end=range_end(key) if prefix else b"")
    )


def op_delete(key: bytes) -> Any:
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key))
