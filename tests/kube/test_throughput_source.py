"""The controller reads each job's throughput from the job's etcd (real etcd, no API)."""

from __future__ import annotations

import json

from edl.coord.embedded import EmbeddedEtcd, free_port
from edl.kube.throughput import EtcdProgressSource
from edl.local.progress import progress_key


async def test_reads_new_points_once_and_backs_off_from_a_dead_etcd() -> None:
    import aetcd

    etcd = EmbeddedEtcd()
    await etcd.astart()
    dead = f"http://127.0.0.1:{free_port()}"
    endpoints = {("default", "a"): etcd.endpoints, ("default", "b"): dead}
    source = EtcdProgressSource(lambda ns, name: endpoints.get((ns, name)), timeout_s=0.5)
    try:
        assert await source.job_throughput("default", "a", float("-inf")) == []  # no key yet
        client = aetcd.Client(host="127.0.0.1", port=etcd.client_port)
        progress = {"samples_per_s": 123.5, "contributing": 3, "remaining_samples": 900}
        await client.put(progress_key("default", "a").encode(), json.dumps(progress).encode())
        [point] = await source.job_throughput("default", "a", float("-inf"))
        assert (point.trainers, point.samples_per_s, point.remaining_samples) == (3, 123.5, 900)
        assert await source.job_throughput("default", "a", float("-inf")) == []  # unchanged
        progress["contributing"] = 4
        await client.put(progress_key("default", "a").encode(), json.dumps(progress).encode())
        [point] = await source.job_throughput("default", "a", float("-inf"))
        assert point.trainers == 4
        await client.close()
        assert await source.job_throughput("default", "b", float("-inf")) == []
        assert await source.job_throughput("default", "missing", float("-inf")) == []
    finally:
        await etcd.astop()


async def test_a_collective_job_s_point_is_its_metrics_record_with_batch_and_noise_scale(
) -> None:
    """A collective job has no master queue: the agents' metrics record (filled by
    `AdaptiveBatch`) is its point, φ and batch included, so the policy sees its φ."""
    from edl.runtime.collective import gateway, keys

    etcd = EmbeddedEtcd()
    await etcd.astart()
    source = EtcdProgressSource(lambda ns, name: etcd.endpoints, timeout_s=0.5,
                                collective=lambda ns, name: name == "ddp")
    try:
        record = {"epoch": 2, "trainers": 2, "samples_per_s": 900.0, "batch": 64,
                  "noise_scale": 150.0, "efficiency": 0.8}
        gateway.put(etcd.endpoints, keys.metrics_key("default", "ddp"), json.dumps(record))
        gateway.put(etcd.endpoints, progress_key("default", "ddp"),
                    json.dumps({"samples_per_s": 1.0, "contributing": 9}))  # not its key
        [point] = await source.job_throughput("default", "ddp", float("-inf"))
        assert (point.trainers, point.samples_per_s) == (2, 900.0)
        assert (point.batch, point.noise_scale) == (64.0, 150.0)
    finally:
        await etcd.astop()
