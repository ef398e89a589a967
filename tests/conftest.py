"""Shared helpers for the in-process control plane and loop tests (tests/cluster, tests/loops):
a virtual clock, a small cluster factory and manifest builders, handed out as fixtures.

Also the suite's two collection hooks (docs/testing.md):

* markers by place, so a new test falls into the right set without a hand list:
  `e2e` for everything under tests/e2e (needs the Kubernetes binaries), `processes` for
  tests/local and tests/runtime (they start `edl run`, trainers and torch processes).
  `make check` runs `-m "not e2e and not processes"`; `make test` runs everything.
* the order: tests that announce themselves as long (a `timeout` marker above the
  default, then the e2e suite, then `slow`) come first, so that pytest-xdist
  (`make test` runs `-n 4 --maxschedchunk 2`) starts the long, mostly idle ones side by
  side instead of leaving one of them for the end. Within a rank the order is pytest's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cpu_profile
import hypothesis_profile
from edl.cluster.inproc.clock import VirtualClock
from edl.cluster.inproc.cluster import InProcessCluster
from edl.cluster.inproc.simulated_pods import Fixed, SimulatedPodRunner

hypothesis_profile.load(os.environ)


def pod_template(
    cpu: str, memory: str = "1Gi", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"labels": dict(labels or {})},
        "spec": {
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
            ]
        },
    }


def replica_set(name: str, replicas: int, cpu: str, memory: str = "1Gi") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "template": pod_template(cpu, memory, {"app": name})},
    }


def batch_job(name: str, parallelism: int, cpu: str, role: str = "trainer") -> dict[str, Any]:
    labels = {"edl.dev/job": name.removesuffix("-trainer"), "edl.dev/role": role}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"parallelism": parallelism, "template": pod_template(cpu, "1Gi", labels)},
    }


TESTS = Path(__file__).resolve().parent
# Top-level test directories whose tests start real edl/torch processes (`processes`).
PROCESS_DIRS = frozenset({"local", "runtime"})
E2E_DIR = "e2e"
# tests/node needs the Kubernetes binaries too (and a kubelet): marked `e2e` as well, and
# `node` (make test runs them in a step of their own: one node for the session).
NODE_DIR = "node"


def _directory(item: pytest.Item) -> str:
    """The item's top-level directory under tests/ ("" for a module directly in tests/)."""
    try:
        parts = item.path.resolve().relative_to(TESTS).parts
    except ValueError:
        return ""
    return parts[0] if len(parts) > 1 else ""


def _expected_length_rank(item: pytest.Item, default_timeout: float) -> tuple[float, int, int]:
    """Smaller runs earlier: an explicit long timeout, then e2e, then `slow`."""
    marker = item.get_closest_marker("timeout")
    timeout = float(marker.args[0]) if marker and marker.args else 0.0
    long_timeout = timeout if timeout > default_timeout else 0.0
    return (-long_timeout, 0 if _directory(item) == E2E_DIR else 1,
            0 if item.get_closest_marker("slow") else 1)


def pytest_configure(config: pytest.Config) -> None:
    """EDL_TEST_CPU=path: record each test's CPU (tests/cpu_profile.py); off otherwise."""
    if os.environ.get(cpu_profile.ENV):
        cpu_profile.register(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        directory = _directory(item)
        if directory in (E2E_DIR, NODE_DIR):
            item.add_marker(pytest.mark.e2e)
        if directory == NODE_DIR:
            item.add_marker(pytest.mark.node)
        elif directory in PROCESS_DIRS:
            item.add_marker(pytest.mark.processes)
    default_timeout = float(config.getini("timeout") or 0)
    items.sort(key=lambda item: _expected_length_rank(item, default_timeout))


@pytest.fixture
def clock() -> Iterator[VirtualClock]:
    virtual = VirtualClock()
    yield virtual
    virtual.close()


def make_cluster(
    clock: VirtualClock,
    nodes: int = 2,
    cpu: str = "8",
    memory: str = "32Gi",
    start: float = 2.0,
    termination: float = 5.0,
    placement: str = "spread",
) -> InProcessCluster:
    """A cluster with fixed start latency and termination time, so tests can reason in time."""
    pod_runner = SimulatedPodRunner(
        clock,
        start_latency=Fixed(start),
        termination={"trainer": Fixed(termination)},
        other_termination=Fixed(termination),
    )
    cluster = InProcessCluster(clock, pod_runner, placement=placement)  # type: ignore[arg-type]
    for index in range(nodes):
        cluster.add_node(f"node-{index}", {"cpu": cpu, "memory": memory})
    return cluster


@pytest.fixture
def cluster_factory(clock: VirtualClock) -> Any:
    def build(**kwargs: Any) -> InProcessCluster:
        return make_cluster(clock, **kwargs)

    return build


def training_job(
    name: str, min_instance: int = 2, max_instance: int = 10, cpu: str = "2", pservers: int = 1
) -> dict[str, Any]:
    """A small valid TrainingJob manifest."""
    return {
        "apiVersion": "edl.dev/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "image": "edl:test",
            "fault_tolerant": True,
            "trainer": {
                "entrypoint": "python train.py",
                "workspace": "/workspace",
                "min-instance": min_instance,
                "max-instance": max_instance,
                "resources": {
                    "requests": {"cpu": cpu, "memory": "1Gi"},
                    "limits": {"cpu": cpu, "memory": "1Gi"},
                },
            },
            "pserver": {
                "min-instance": pservers,
                "max-instance": pservers,
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            },
            "master": {"resources": {"requests": {"cpu": "500m", "memory": "300Mi"}}},
        },
    }


class Manifests:
    """Manifest builders, handed to tests as the `manifests` fixture."""

    pod_template = staticmethod(pod_template)
    replica_set = staticmethod(replica_set)
    batch_job = staticmethod(batch_job)
    training_job = staticmethod(training_job)


@pytest.fixture
def manifests() -> type[Manifests]:
    return Manifests
