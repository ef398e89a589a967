"""Fixtures: a real etcd server per test (fresh data, free loopback ports)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from edl.coord.embedded import EmbeddedEtcd


@pytest.fixture
async def etcd() -> AsyncIterator[EmbeddedEtcd]:
    async with EmbeddedEtcd() as server:
        yield server
