"""Shrinks name exact pods, chosen like the scheduler's preemption (issue 13)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from edl.accounting import PodResources
from edl.policy import get_policy

if "policy_cluster" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "policy_cluster", Path(__file__).with_name("cluster.py")
    )
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["policy_cluster"] = _module
    _spec.loader.exec_module(_module)
Cluster, Job = sys.modules["policy_cluster"].Cluster, sys.modules["policy_cluster"].Job
DEFAULT = get_policy("default")


def nodes_of(c) -> dict[str, str]:
    return {p.name: p.node for p in c.pods}


def test_cpu_trainers_on_a_gpu_node_are_shed_for_a_gpu_pod_that_lacks_its_cpu() -> None:
    c = Cluster()
    c.add_node("gpu", 48_000, 192_000, 8)
    for i in range(3):
        c.add_node(f"cpu{i}", 32_000, 128_000)
    c.add_job(Job("ns", "cpu", 2, 60, 20, cpu=4000, memory=8000))
    c.schedule()  # first-fit: 12 trainers fill the GPU node's CPU, 8 go to cpu0
    assert sum(1 for p in c.pods if p.node == "gpu") == 12
    c.add_pod(PodResources(6000, 6000, 12_000, 12_000, 1, 1))  # inference: 6 cores + 1 GPU
    decision = DEFAULT.plan(c.views(), c.resources(), 1.0)[0]
    where = nodes_of(c)
    # two 4-core trainers make 8 >= 6 cores on the GPU node; none elsewhere is useful
    assert decision.parallelism - decision.target == 2
    assert [where[v] for v in decision.victims] == ["gpu", "gpu"]
    c.apply([decision])
    assert all(p.node for p in c.pods if p.job is None) and c.overcommitted() == []


def test_a_gpu_pod_is_not_given_cpu_from_nodes_without_gpus() -> None:
    c = Cluster()
    c.add_node("gpu", 16_000, 64_000, 2)
    c.add_node("cpu", 16_000, 64_000)
    c.add_job(Job("ns", "g", 1, 4, 2, cpu=2000, memory=1000, gpu=1))  # both GPUs taken
    c.add_job(Job("ns", "c", 1, 30, 13, cpu=2000, memory=1000))
    c.schedule()
    c.add_pod(PodResources(1000, 1000, 1000, 1000, 1, 1))
    decisions = {d.name: d for d in DEFAULT.plan(c.views(), c.resources(), 1.0)}
    assert decisions["c"].victims == ()  # CPU trainers hold no GPU: useless to shed
    assert len(decisions["g"].victims) == 1


def test_wide_trainers_get_room_only_where_they_fit() -> None:
    """A 12-core job below its share: 3-core trainers on 8-core nodes are never shed."""
    c = Cluster()
    for i in range(4):
        c.add_node(f"s{i}", 8000, 32_000)
    c.add_node("big", 64_000, 256_000)
    c.add_job(Job("ns", "narrow", 2, 80, 28, cpu=3000, memory=1000))
    c.schedule()  # 2 per small node, 20 on the big one
    c.add_job(Job("ns", "wide", 1, 8, 1, cpu=12_000, memory=1000))
    c.schedule()  # the big node has 4 cores left: the wide trainer is pending
    decisions = {d.name: d for d in DEFAULT.plan(c.views(), c.resources(), 1.0)}
    where = nodes_of(c)
    assert decisions["narrow"].victims
    assert {where[v] for v in decisions["narrow"].victims} == {"big"}
    # 4 idle + 3 x 3 freed = 13 >= 12 for its min, 4 more for a second (its share:
    # equal fulfillment over 96 cores gives wide 2, narrow 21)
    assert decisions["narrow"].target == 21
    for _ in range(4):
        c.apply(list(DEFAULT.plan(c.views(), c.resources(), 1.0)))
        assert c.overcommitted() == []
    assert c.running() == {"narrow": 21, "wide": 2}


@st.composite
def shared_clusters(draw):
    """GPU and CPU nodes, CPU and GPU jobs spread over them, pending pods that wait."""
    c = Cluster()
    for i in range(draw(st.integers(1, 4))):
        gpu = draw(st.sampled_from([0, 0, 4, 8]))
        c.add_node(f"n{i}", draw(st.sampled_from([8000, 16_000, 48_000])), 64_000, gpu)
    shapes = [(3000, 2000, 0), (4000, 4000, 0), (12_000, 8000, 0), (6000, 4000, 1)]
    for j in range(draw(st.integers(1, 4))):
        lo = draw(st.integers(1, 3))
        hi = draw(st.integers(lo + 1, 16))
        cpu, memory, gpu = draw(st.sampled_from(shapes))
        c.add_job(Job("ns", f"job{j}", lo, hi, draw(st.integers(lo, hi)), cpu, memory, gpu))
        c.schedule()
    for _ in range(draw(st.integers(0, 4))):
        cpu, memory, gpu = draw(st.sampled_from([(2000, 2000, 0), (6000, 12_000, 1)]))
        c.add_pod(PodResources(cpu, cpu, memory, memory, gpu, gpu))
    c.schedule()
    return c


def _fits(free, shape) -> bool:
    return all(free[d] >= shape[d] for d in range(3))


@settings(max_examples=300, deadline=None)
@given(shared_clusters(), st.sampled_from([0.9, 0.97, 1.0]))
def test_every_shed_trainer_frees_room_a_waiting_pod_can_use(c, load) -> None:
    """On every node where victims are named, some waiting pod (a pending pod, or a
    trainer of another job) does not fit now and fits once they leave; else the
    reason says the shrink is for max load. Named victims are live pods of the job,
    never more than the shrink, and the plan respects min."""
    views, resources = c.views(), c.resources()
    decisions, placement = DEFAULT.plan_with_placement(views, resources, load)
    idle = resources.nodes
    # room the plan gave to trainers (placed or grown) is not free when it sheds
    given = {name: [0, 0, 0] for name in idle.cpu_idle_milli}
    for view in views:
        for node in placement[view.key]:
            given[node][0] += view.cpu_request_milli
            given[node][1] += view.memory_request_mega
            given[node][2] += view.gpu_request
    pending = [
        (p.resources.cpu_request_milli, p.resources.memory_request_mega, p.resources.gpu_request)
        for p in c.pods if p.job is None and not p.node
    ]
    pods = {p.name: p for p in c.pods}
    for view, decision in zip(views, decisions, strict=True):
        assert decision.target >= view.min_instance
        assert len(decision.victims) <= max(0, decision.parallelism - decision.target)
        for victim in decision.victims:
            assert pods[victim].job == view.name and pods[victim].node
        if not decision.victims or "max load" in decision.reason or "above" in decision.reason:
            continue  # shed for the load cap: the reason says so
        if pending:  # pending pods take room first-fit inside the plan: the node's room
            continue  # at shedding time is not the idle room seen here
        waiting = pending + [
            (o.cpu_request_milli, o.memory_request_mega, o.gpu_request)
            for o in views if o.name != view.name
        ]
        shape = (view.cpu_request_milli, view.memory_request_mega, view.gpu_request)
        for node in {pods[v].node for v in decision.victims}:
            free = (
                idle.cpu_idle_milli[node] - given[node][0],
                idle.memory_free_mega[node] - given[node][1],
                idle.gpu_free[node] - given[node][2],
            )
            # everything named on this node, by every job, leaves together
            after = list(free)
            for other, d2 in zip(views, decisions, strict=True):
                on = sum(1 for v in d2.victims if pods[v].node == node)
                for d, amount in enumerate(
                    (other.cpu_request_milli, other.memory_request_mega, other.gpu_request)
                ):
                    after[d] += on * amount
            # some waiting pod lacks room here, fits once they leave, and lacks
            # something this job's trainers hold (never a useless victim)
            assert any(
                not _fits(free, w)
                and _fits(after, w)
                and any(w[d] > free[d] and shape[d] > 0 for d in range(3))
                for w in waiting
            ), (node, decision)
