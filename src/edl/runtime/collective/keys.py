"""Where a collective job keeps its few facts in the job's etcd (one prefix per job).

- ``collective/rendezvous``: ``host:port`` of the c10d store (written by `edl rendezvous`);
- ``collective/agents/<pod>``: JSON of an agent's last rendezvous (round, rank, nodes);
- ``collective/metrics``: JSON of the last ``name=value`` line the script printed;
- ``collective/failures/<pod>``: JSON of an agent's last worker failure (`failures`);
- ``collective/batch``: the total batch the Autoscaler chose (a whole number), read
  once by each round's rank 0 (`adaptive.AdaptiveBatch`) and broadcast to its round.

Outside that prefix, ``state/checkpoint-health/rank0``: the checkpoint health of the
pod hosting rank 0 (`ckpt_health`), beside the pservers' records of the same format.
"""

from __future__ import annotations


def job_prefix(namespace: str, job: str) -> str:
    return f"/edl/{namespace}/{job}/collective/"


def rendezvous_key(namespace: str, job: str) -> str:
    return job_prefix(namespace, job) + "rendezvous"


def agents_prefix(namespace: str, job: str) -> str:
    return job_prefix(namespace, job) + "agents/"


def agent_key(namespace: str, job: str, pod: str) -> str:
    return agents_prefix(namespace, job) + pod


def metrics_key(namespace: str, job: str) -> str:
    return job_prefix(namespace, job) + "metrics"


def batch_key(namespace: str, job: str) -> str:
    return job_prefix(namespace, job) + "batch"


def failures_prefix(namespace: str, job: str) -> str:
    return job_prefix(namespace, job) + "failures/"


def failure_key(namespace: str, job: str, pod: str) -> str:
    """JSON of an agent's last worker failure: the script's error, torch's restarts left."""
    return failures_prefix(namespace, job) + pod


def checkpoint_health_key(namespace: str, job: str) -> str:
    """JSON of rank 0's checkpoint health, where `edl.local.checkpoints` reads pservers'."""
    return f"/edl/{namespace}/{job}/state/checkpoint-health/rank0"
