"""Tearing a local run down in an order that loses nothing."""

from __future__ import annotations

import contextlib

from edl.cluster.inproc import InProcessCluster
from edl.cluster.port import ClusterError
from edl.jobparser import child_names


async def delete_workloads(cluster: InProcessCluster, namespace: str, name: str) -> None:
    """Delete trainers first (they hand tasks back), then the master and pservers."""
    names = child_names(name)
    steps = [
        (cluster.delete_trainer_job, names["trainer"]),
        (cluster.delete_replica_set, names["pserver"]),
        (cluster.delete_replica_set, names["master"]),
        (cluster.delete_service, names["master"]),
    ]
    for delete, child in steps:
        with contextlib.suppress(ClusterError):
            await delete(namespace, child)
    with contextlib.suppress(ClusterError):
        cluster.delete_training_job(namespace, name)
    for pod in cluster.list_pods():  # reservations and other bare pods
        with contextlib.suppress(ClusterError):
            cluster.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
