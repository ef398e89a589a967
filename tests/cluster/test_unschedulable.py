"""Defect 3: a pod that fits no node carries kube-scheduler's reason (PodScheduled=False)."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from edl.cluster.inproc.scheduler import Node, unschedulable_reason

nodes_st = st.lists(
    st.tuples(st.integers(0, 8000), st.integers(0, 8000), st.integers(0, 2)), min_size=1, max_size=6
)
want_st = st.tuples(st.integers(0, 9000), st.integers(0, 9000), st.integers(0, 3))


def make(sizes: list[tuple[int, int, int]]) -> list[Node]:
    return [Node(f"n{i}", i, cpu, mem, gpu) for i, (cpu, mem, gpu) in enumerate(sizes)]


@settings(max_examples=300, deadline=None)
@given(nodes_st, want_st)
def test_reason_counts_each_node_per_missing_resource(sizes, want) -> None:
    nodes = make(sizes)
    reason = unschedulable_reason(nodes, *want)
    fits = any(all(w <= h for w, h in zip(want, size, strict=True)) for size in sizes)
    if any(not all(w <= h for w, h in zip(want, size, strict=True)) for size in sizes):
        assert reason.startswith(f"0/{len(nodes)} nodes are available: ") and reason.endswith(".")
    else:
        assert reason == ""
    for index, name in enumerate(("cpu", "memory", "nvidia.com/gpu")):
        short = sum(want[index] > size[index] for size in sizes)
        assert (f"{short} Insufficient {name}" in reason) == (short > 0)
    assert fits or reason


def test_free_room_versus_allocatable() -> None:
    node = Node("n0", 0, 2000, 4000, 0)
    node.free_cpu_milli = 500  # another pod holds 1.5 cores
    assert unschedulable_reason([node], 1000, 100, 0) == (
        "0/1 nodes are available: 1 Insufficient cpu."
    )
    assert unschedulable_reason([node], 1000, 100, 0, total=True) == ""  # fits once room frees
    assert unschedulable_reason([node], 3000, 5000, 1, total=True) == (
        "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, "
        "1 Insufficient nvidia.com/gpu."
    )


def test_pending_pod_gets_the_condition_and_loses_it_when_bound(
    clock, cluster_factory, manifests
) -> None:
    cluster = cluster_factory(nodes=1, cpu="4")
    seen: dict[str, list] = {}

    def conditions(prefix: str) -> list:
        return [c for p in cluster.list_pods() if p["metadata"]["name"].startswith(prefix)
                for c in p["status"].get("conditions", [])]

    async def scenario():
        await cluster.create_replica_set(manifests.replica_set("web", 1, "3"))
        await asyncio.sleep(5)
        await cluster.create_replica_set(manifests.replica_set("other", 1, "3"))
        await asyncio.sleep(5)
        seen["pending"] = conditions("other-")
        cluster.scale("ReplicaSet", "default", "web", 0)  # its room frees: other binds
        await asyncio.sleep(60)
        seen["bound"] = conditions("other-")

    clock.run(scenario())
    assert seen["pending"] == [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient cpu.",
    }]
    assert seen["bound"] == [{"type": "PodScheduled", "status": "True"}]
