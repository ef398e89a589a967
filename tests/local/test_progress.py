"""The run reads the master's progress where the pod runner writes it (real etcd)."""

from __future__ import annotations

import json

from edl.coord.embedded import EmbeddedEtcd
from edl.coord.keys import job_prefix
from edl.local.progress import ProgressReader, progress_key
from edl.runtime.coordination import PROGRESS_KEY


def test_key_is_the_one_the_master_publishes() -> None:
    assert progress_key("ns", "job") == f"{job_prefix('ns', 'job')}/state/{PROGRESS_KEY}"


async def test_reader_returns_latest_and_keeps_it_when_etcd_is_gone() -> None:
    import aetcd

    etcd = EmbeddedEtcd()
    await etcd.astart()
    try:
        reader = ProgressReader(etcd.endpoints, "default", "digits")
        assert await reader.read() is None
        client = aetcd.Client(host="127.0.0.1", port=etcd.client_port)
        await client.put(progress_key("default", "digits").encode(),
                         json.dumps({"pass": 2, "tasks_done": 5}).encode())
        await client.close()
        assert await reader.read() == {"pass": 2, "tasks_done": 5}
    finally:
        await etcd.astop()
    assert await reader.read(timeout=5) == {"pass": 2, "tasks_done": 5}
