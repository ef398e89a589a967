"""Bad input gives one clear error, never a hang beyond the stated timeout."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

from edl.coord import (
    Election,
    EndpointError,
    EtcdClient,
    EtcdConfigError,
    EtcdUnavailableError,
)
from edl.coord.embedded import EmbeddedEtcd
from edl.procs import free_port

# A stated timeout may overshoot by event-loop lag on a loaded 2-core machine; a hang
# (gRPC's default back-off, a retry loop without deadline) overshoots by far more.
SLACK = 5.0


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A port that accepts TCP connections but never answers (a hung etcd)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def closed_endpoint() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.mark.parametrize("kind", ["refused", "silent"])
async def test_unreachable_etcd_fails_within_timeout(kind: str, silent_endpoint: str) -> None:
    endpoint = closed_endpoint() if kind == "refused" else silent_endpoint
    client = EtcdClient(endpoint, 2, 1.0, 2)
    try:
        started = time.monotonic()
        with pytest.raises(EtcdUnavailableError, match=r"127\.0\.0\.1"):
            await client.get_key("x")
        assert time.monotonic() - started < 1.0 + SLACK
        started = time.monotonic()
        with pytest.raises(EtcdUnavailableError, match="gave up after 2"):
            await client.register(7000, timeout=2.0)
        assert time.monotonic() - started < 2.0 + SLACK
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await Election(client, "m:1").campaign(timeout=2.0)
        assert time.monotonic() - started < 2.0 + SLACK
    finally:
        await asyncio.wait_for(client.shutdown(), 5.0)


async def test_failover_to_a_second_endpoint(etcd: EmbeddedEtcd) -> None:
    client = EtcdClient(f"{closed_endpoint()},{etcd.endpoints}", 1, 2.0, 2)
    try:
        assert await client.register(7000, timeout=10) == 0
        assert await client.get_key("pservers/0") == b"127.0.0.1:7000"
    finally:
        await client.shutdown()


@pytest.mark.parametrize(
    ("endpoints", "fragment"),
    [
        ("", "non-empty"),
        ("127.0.0.1:2379,,127.0.0.1:2380", "item 1 is empty"),
        ("https://127.0.0.1:2379", "scheme 'https'"),
        ("127.0.0.1:port", "127.0.0.1:port"),
    ],
)
def test_malformed_endpoints(endpoints: str, fragment: str) -> None:
    with pytest.raises(EndpointError) as error:
        EtcdClient(endpoints, 1, 1.0, 2)
    assert fragment in str(error.value)


def test_bad_numbers_are_named_together() -> None:
    with pytest.raises(EtcdConfigError) as error:
        EtcdClient("127.0.0.1:2379", -1, 0, 0)
    message = str(error.value)
    assert "num_pservers" in message and "ttl" in message and "dial_timeout" in message


async def test_ttl_below_etcd_minimum(etcd: EmbeddedEtcd) -> None:
    client = EtcdClient(etcd.endpoints, 1, 2.0, 1)
    try:
        started = time.monotonic()
        with pytest.raises(EtcdConfigError, match="below etcd's minimum lease TTL of 2 s"):
            await client.register(7000, timeout=10)
        assert time.monotonic() - started < 8.0  # no retrying until the timeout
        with pytest.raises(EtcdConfigError, match="minimum"):
            await Election(client, "m:1").campaign(timeout=5)
        assert await client.list_pservers() == {}
    finally:
        await client.shutdown()


async def test_bad_port(etcd: EmbeddedEtcd) -> None:
    client = EtcdClient(etcd.endpoints, 1, 2.0, 2)
    try:
        with pytest.raises(EtcdConfigError, match="port"):
            await client.register(0)
    finally:
        await client.shutdown()
