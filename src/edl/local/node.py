"""This machine as the one node of a local run.

By default the node's allocatable is what the machine has: its usable cores
and its memory. A local run may declare a *virtual* allocatable instead
(``edl run --cpu 8 --memory 8Gi``): the scheduler and the Autoscaler then
plan as if the machine were that size, while the processes share the real
cores. This is how a job whose requests add up to more than a small machine
still runs, and how a test makes room scarce on purpose.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

LOCAL_NODE_NAME = "local"


def machine_cpu_milli() -> int:
    """Cores this process may use (affinity-aware), in millicores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        cores = os.cpu_count() or 1
    return cores * 1000


def machine_memory_bytes(meminfo: Path = Path("/proc/meminfo")) -> int:
    """MemTotal of this machine, in bytes."""
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no MemTotal in {meminfo}")


def local_node(
    cpu: str | None = None, memory: str | None = None, name: str = LOCAL_NODE_NAME
) -> dict[str, Any]:
    """A v1 Node manifest for this machine; ``cpu``/``memory`` override the measured sizes."""
    allocatable = {
        "cpu": cpu if cpu is not None else f"{machine_cpu_milli()}m",
        "memory": memory if memory is not None else str(machine_memory_bytes()),
        "pods": "110",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "edl.dev/local": "true"},
        },
        "status": {
            "capacity": dict(allocatable),
            "allocatable": dict(allocatable),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
