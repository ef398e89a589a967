"""Where a collective job keeps its few facts in the job's etcd (one prefix per job).

- ``collective/rendezvous``: ``host:port`` of the c10d store (written by `edl rendezvous`);
- ``collective/agents/<pod>``: JSON of an agent's last rendezvous (round, rank, nodes);
- ``collective/metrics``: JSON of the last ``name=value`` line the script printed.
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

