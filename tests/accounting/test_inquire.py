"""inquire_resource and ResourceLedger: the original's InquiryResource over plain dicts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edl.accounting import (
    NodeCapacity,
    PodRequestError,
    PodResources,
    ResourceLedger,
    inquire_resource,
)
from edl.api.quantity import QuantityError


def node(name: str, cpu: str = "4", memory: str = "8Gi", gpu: str | None = None) -> dict:
    allocatable = {"cpu": cpu, "memory": memory}
    if gpu is not None:
        allocatable["nvidia.com/gpu"] = gpu
    return {"kind": "Node", "metadata": {"name": name}, "status": {"allocatable": allocatable}}


def pod(
    name: str,
    cpu: str = "1",
    memory: str = "1G",
    phase: str = "Running",
    node_name: str | None = "n1",
    role: str | None = None,
    gpu: int = 0,
    deleting: bool = False,
) -> dict:
    requests: dict = {"cpu": cpu, "memory": memory}
    limits: dict = {"cpu": cpu, "memory": memory}
    if gpu:
        limits["nvidia.com/gpu"] = gpu
    metadata: dict = {"name": name, "namespace": "ns", "labels": {}}
    if role:
        metadata["labels"]["edl.dev/role"] = role
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict = {
        "containers": [{"name": "c", "resources": {"requests": requests, "limits": limits}}]
    }
    if node_name:
        spec["nodeName"] = node_name
    return {"kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": phase}}


def test_totals_requests_and_room_follow_the_original() -> None:
    res = inquire_resource(
        [node("n1", gpu="2"), node("n2", cpu="2", memory="4G")],
        [
            pod("running", cpu="500m", memory="100Mi"),
            pod("terminating", cpu="1", deleting=True),
            pod("done", cpu="3", phase="Succeeded"),
            pod("failed", cpu="3", phase="Failed"),
            pod("bound-pending", cpu="250m", phase="Pending", node_name="n2"),
            pod("unbound", cpu="2", phase="Pending", node_name=None),
            pod("gpu", cpu="100m", memory="0", gpu=1),
        ],
    )
    assert res.node_count == 2
    assert (res.cpu_total_milli, res.memory_total_mega, res.gpu_total) == (6000, 8590 + 4000, 2)
    # succeeded/failed do not count; pending (bound or not) and terminating do
    assert res.cpu_request_milli == 500 + 1000 + 250 + 2000 + 100
    assert res.cpu_limit_milli == res.cpu_request_milli
    assert res.memory_request_mega == 105 + 1000 + 1000 + 1000
    assert (res.gpu_request, res.gpu_limit) == (1, 1)
    # only bound pods take a node's room
    assert res.nodes.cpu_idle_milli == {"n1": 4000 - 500 - 1000 - 100, "n2": 2000 - 250}
    assert res.nodes.memory_free_mega == {"n1": 8590 - 105 - 1000, "n2": 4000 - 1000}
    assert res.nodes.gpu_free == {"n1": 1, "n2": 0}
    # the unbound non-trainer pod is listed for policies to make room for
    assert res.pending == (PodResources(2000, 2000, 1000, 1000, 0, 0),)


def test_unbound_trainers_are_not_listed_as_pending_pods() -> None:
    res = inquire_resource(
        [node("n1")], [pod("t", phase="Pending", node_name=None, role="trainer")]
    )
    assert res.pending == ()
    assert res.cpu_request_milli == 1000


def test_pod_on_unknown_node_counts_in_aggregate_only() -> None:
    res = inquire_resource([node("n1")], [pod("p", node_name="gone")])
    assert res.cpu_request_milli == 1000
    assert res.nodes.cpu_idle_milli == {"n1": 4000}


def test_nodes_str_is_one_line_per_node() -> None:
    res = inquire_resource([node("b"), node("a", gpu="1")], [pod("p", node_name="a")])
    assert str(res.nodes).splitlines() == [
        "a: cpu idle 3000m, memory free 7590M, gpu free 1",
        "b: cpu idle 4000m, memory free 8590M, gpu free 0",
    ]


def test_bad_quantities_name_the_object_and_field() -> None:
    with pytest.raises(QuantityError, match=r"node n1: status.allocatable.cpu"):
        inquire_resource([node("n1", cpu="four")], [])
    with pytest.raises(PodRequestError, match=r"pod ns/p: spec.containers\[0\].resources"):
        inquire_resource([node("n1")], [pod("p", cpu="x")])


# -- the incremental ledger agrees with a from-scratch inquiry -----------------------------

_NODES = [f"n{i}" for i in range(4)]
_operation = st.one_of(
    st.tuples(st.just("node"), st.sampled_from(_NODES), st.integers(0, 8000)),
    st.tuples(st.just("drop-node"), st.sampled_from(_NODES), st.just(0)),
    st.tuples(
        st.just("pod"),
        st.tuples(
            st.integers(0, 5),  # pod id
            st.integers(0, 3000),  # cpu milli
            st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
            st.sampled_from([None, *_NODES]),
            st.booleans(),  # trainer
        ),
        st.just(0),
    ),
    st.tuples(st.just("drop-pod"), st.integers(0, 5), st.just(0)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_operation, max_size=40))
def test_incremental_updates_match_inquire_resource(operations: list) -> None:
    ledger = ResourceLedger()
    nodes: dict[str, dict] = {}
    pods: dict[int, dict] = {}
    for kind, what, amount in operations:
        if kind == "node":
            nodes[what] = node(what, cpu=f"{amount}m")
            ledger.set_node_object(nodes[what])
        elif kind == "drop-node":
            nodes.pop(what, None)
            ledger.remove_node(what)
        elif kind == "pod":
            ident, cpu, phase, node_name, trainer = what
            pods[ident] = pod(
                f"p{ident}",
                cpu=f"{cpu}m",
                phase=phase,
                node_name=node_name,
                role="trainer" if trainer else None,
            )
            ledger.set_pod(pods[ident])
        else:
            pods.pop(what, None)
            ledger.remove_pod("ns", f"p{what}")
    assert ledger.snapshot() == inquire_resource(nodes.values(), pods.values())


def test_ledger_takes_room_of_pods_bound_before_their_node_appears() -> None:
    ledger = ResourceLedger()
    ledger.set_pod_resources("ns", "p", PodResources(cpu_request_milli=700), node="late")
    ledger.set_node("late", NodeCapacity(cpu_milli=1000, memory_mega=10))
    assert ledger.snapshot().nodes.cpu_idle_milli == {"late": 300}
    ledger.set_pod_resources("ns", "p", PodResources(cpu_request_milli=700), terminal=True)
    assert ledger.snapshot().nodes.cpu_idle_milli == {"late": 1000}
    assert len(ledger) == 0
