"""put_if_registered against a real etcd: a deposed pserver cannot overwrite its replacement."""

from __future__ import annotations

import functools

import pytest

from coord.clients import etcd_client
from edl.coord import NotRegisteredError
from edl.coord.embedded import EmbeddedEtcd

PREFIX = "/edl/test/fenced"
# long TTL: keep-alive (every TTL/3) cannot notice the revoke during the test, so the
# deposed client still believes its lease valid and only etcd's txn can refuse it
LONG_TTL = 30


client = functools.partial(etcd_client, prefix=PREFIX, ttl=LONG_TTL)


async def test_put_succeeds_while_registered_and_names_the_index(etcd: EmbeddedEtcd) -> None:
    pserver = client(etcd)
    try:
        with pytest.raises(NotRegisteredError):  # not registered yet
            await pserver.put_if_registered("checkpoints/0", b"early")
        assert await pserver.register(7001) == 0
        await pserver.put_if_registered("checkpoints/0", b"v1")
        await pserver.put_if_registered("checkpoints/0", b"v2", index=0)
        assert await pserver.get_key("checkpoints/0") == b"v2"
        with pytest.raises(NotRegisteredError, match="pserver 1"):  # an index it never held
            await pserver.put_if_registered("checkpoints/1", b"x", index=1)
        assert await pserver.get_key("checkpoints/1") == b""
    finally:
        await pserver.shutdown()


async def test_deposed_pserver_cannot_overwrite_its_replacement(etcd: EmbeddedEtcd) -> None:
    deposed, replacement = client(etcd), client(etcd)
    try:
        assert await deposed.register(7001) == 0
        await deposed.put_if_registered("checkpoints/0", b"old")
        # etcd drops the lease (as after an expiry the owner did not see): index 0 is free
        assert deposed._lease is not None
        await replacement.transport.revoke(deposed._lease.id, 5.0)
        assert deposed.is_registered(), "the deposed client has not noticed yet"
        with pytest.raises(NotRegisteredError, match="no longer held"):
            await deposed.put_if_registered("checkpoints/0", b"stale")
        assert await replacement.get_key("checkpoints/0") == b"old"

        assert await replacement.register(7002) == 0  # re-claims the index
        await replacement.put_if_registered("checkpoints/0", b"new")
        assert deposed.is_registered(), "still has not noticed"
        with pytest.raises(NotRegisteredError, match="no longer held"):
            await deposed.put_if_registered("checkpoints/0", b"stale")
        assert await replacement.get_key("checkpoints/0") == b"new"
    finally:
        await deposed.shutdown()
        await replacement.shutdown()
    with pytest.raises(NotRegisteredError):  # shut down: never writes again
        await deposed.put_if_registered("checkpoints/0", b"late")
