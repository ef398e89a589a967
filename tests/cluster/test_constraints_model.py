"""The in-process model's taints, selectors, required affinity, PriorityClass with
kube-scheduler's default preemption, and ResourceQuota admission (docs/fidelity.md)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edl.cluster.inproc.preemption import Candidate, Victim, pick_node, select_victims_on_node
from edl.cluster.port import ClusterError

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def bare_pod(name, cpu="1", namespace="default", **spec):
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
                     **spec}}


def where(cluster, prefix=""):
    return {p.name: p.node for p in cluster.pod_records() if p.name.startswith(prefix)}


def test_taints_keep_off_pods_without_the_toleration(clock, cluster_factory):
    cluster = cluster_factory(nodes=1, cpu="4")
    cluster.add_node("gpu", {"cpu": "4", "memory": "32Gi"}, {"pool": "gpu"}, [GPU_TAINT])

    async def scenario():
        for i in range(6):
            cluster.create_pod(bare_pod(f"plain-{i}"))
        cluster.create_pod(bare_pod("tolerant", tolerations=[
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            nodeSelector={"pool": "gpu"}))
        await asyncio.sleep(5)

    clock.run(scenario())
    placed = where(cluster, "plain-")
    assert sorted(n for n in placed.values() if n) == ["node-0"] * 4
    assert where(cluster)["tolerant"] == "gpu"
    waiting = next(p for p in cluster.pod_records() if p.name == "plain-4")
    message = waiting.manifest["status"]["conditions"][-1]["message"]
    assert "1 node(s) had untolerated taint {nvidia.com/gpu: present}" in message
    assert "1 Insufficient cpu" in message


def test_required_node_affinity_and_selector_pick_the_nodes(clock, cluster_factory):
    cluster = cluster_factory(nodes=0)
    for zone in ("a", "b"):
        cluster.add_node(f"n-{zone}", {"cpu": "8", "memory": "8Gi"},
                         {"zone": zone, "cores": "8"})
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "NotIn", "values": ["a"]},
            {"key": "cores", "operator": "Gt", "values": ["4"]}]}]}}}

    async def scenario():
        for i in range(3):
            cluster.create_pod(bare_pod(f"aff-{i}", affinity=affinity))
        cluster.create_pod(bare_pod("sel", nodeSelector={"zone": "a"}))
        cluster.create_pod(bare_pod("none", nodeSelector={"zone": "c"}))
        await asyncio.sleep(5)

    clock.run(scenario())
    assert set(where(cluster, "aff-").values()) == {"n-b"}
    assert where(cluster)["sel"] == "n-a"
    assert where(cluster)["none"] is None


def test_priority_class_admission(clock, cluster_factory):
    cluster = cluster_factory(nodes=1)
    cluster.create_priority_class("high", 1000)
    cluster.create_pod(bare_pod("p", priorityClassName="high"))
    assert next(iter(cluster.pod_records())).priority == 1000
    with pytest.raises(ClusterError, match="no PriorityClass with name nope was found"):
        cluster.create_pod(bare_pod("q", priorityClassName="nope"))


def test_a_higher_priority_pod_preempts_the_lowest_priority_pods_it_needs(
        clock, cluster_factory):
    cluster = cluster_factory(nodes=2, cpu="4", start=1.0, termination=3.0)
    cluster.create_priority_class("low", 1)
    cluster.create_priority_class("mid", 50)
    cluster.create_priority_class("high", 1000)
    seen = {}

    async def scenario():
        # node-0: four 1-CPU pods of priority 1; node-1: two 2-CPU pods of priority 50
        for i in range(4):
            cluster.create_pod(bare_pod(f"low-{i}", priorityClassName="low",
                                        nodeName="node-0"))
        for i in range(2):
            cluster.create_pod(bare_pod(f"mid-{i}", cpu="2", priorityClassName="mid",
                                        nodeName="node-1"))
        await asyncio.sleep(2)
        cluster.create_pod(bare_pod("svc", cpu="2", priorityClassName="high"))
        await asyncio.sleep(0.5)
        svc = next(p for p in cluster.pod_records() if p.name == "svc")
        seen["nominated"] = svc.manifest["status"].get("nominatedNodeName")
        seen["leaving"] = sorted(p.name for p in cluster.pod_records() if p.terminating)
        seen["reasons"] = {
            c.get("reason") for p in cluster.pod_records() if p.terminating
            for c in p.manifest["status"]["conditions"] if c["type"] == "DisruptionTarget"}
        await asyncio.sleep(10)

    clock.run(scenario())
    # the lowest-priority node wins, and only two of its four pods go
    assert seen["nominated"] == "node-0"
    assert len(seen["leaving"]) == 2 and all(n.startswith("low-") for n in seen["leaving"])
    assert seen["reasons"] == {"PreemptionByScheduler"}
    assert where(cluster)["svc"] == "node-0"
    assert sum(1 for n in where(cluster, "low-").values() if n) == 2


def test_room_held_for_a_nominated_pod_is_not_taken_by_others(clock, cluster_factory):
    cluster = cluster_factory(nodes=1, cpu="5", start=1.0, termination=5.0)
    cluster.create_priority_class("high", 1000)

    async def scenario():
        for i in range(4):  # one CPU stays free
            cluster.create_pod(bare_pod(f"low-{i}", nodeName="node-0"))
        await asyncio.sleep(2)
        cluster.create_pod(bare_pod("svc", cpu="3", priorityClassName="high"))
        await asyncio.sleep(1)
        cluster.create_pod(bare_pod("late", cpu="1"))  # priority 0, arrives while they leave
        await asyncio.sleep(20)

    clock.run(scenario())
    assert where(cluster)["svc"] == "node-0"
    # the free CPU was held for the preemptor: the late pod did not slip into it
    assert where(cluster)["late"] is None
    assert sum(1 for n in where(cluster, "low-").values() if n) == 2


def test_resource_quota_admission(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=2)
    cluster.create_resource_quota({
        "metadata": {"name": "cap", "namespace": "default"},
        "spec": {"hard": {"requests.cpu": "3", "count/pods": "10"}}})

    async def scenario():
        cluster.create_pod(bare_pod("a", cpu="2"))
        with pytest.raises(ClusterError, match=r"exceeded quota: cap, requested: requests\.cpu"):
            cluster.create_pod(bare_pod("b", cpu="2"))
        cluster.create_pod(bare_pod("c", cpu="1"))
        cluster.create_pod(bare_pod("elsewhere", cpu="4", namespace="other"))
        await cluster.create_replica_set(manifests.replica_set("web", 3, "1"))
        await asyncio.sleep(5)
        [room] = (await cluster.inquiry_resource()).quotas
        assert room.used == {"requests.cpu": 3000, "count/pods": 2}

    clock.run(scenario())
    assert where(cluster, "web-") == {}  # the ReplicaSet's pods are refused, no crash


# -- the preemption transcription, as properties ----------------------------------------

victims = st.lists(
    st.builds(Victim, st.text("abcdef", min_size=1, max_size=3), st.integers(0, 5),
              st.floats(0, 100), st.tuples(st.integers(0, 4), st.integers(0, 4))),
    max_size=6, unique_by=lambda v: v.name,
)


@given(victims, st.tuples(st.integers(0, 6), st.integers(0, 6)), st.integers(0, 6),
       st.tuples(st.integers(-2, 4), st.integers(-2, 4)))
def test_select_victims_on_node(pods, want, priority, free):
    chosen = select_victims_on_node(want, priority, free, pods)
    lower = [p for p in pods if p.priority < priority]
    everything = tuple(f + sum(p.requests[d] for p in lower) for d, f in enumerate(free))
    if chosen is None:
        assert any(w > e for w, e in zip(want, everything, strict=True))
        return
    assert all(v.priority < priority for v in chosen)
    after = tuple(f + sum(v.requests[d] for v in chosen) for d, f in enumerate(free))
    assert all(w <= a for w, a in zip(want, after, strict=True))
    # no victim could have stayed: putting any one back leaves the pod without room
    for victim in chosen:
        back = tuple(a - victim.requests[d] for d, a in enumerate(after))
        assert any(w > b for w, b in zip(want, back, strict=True)) or any(
            o.priority < victim.priority or (o.priority == victim.priority
                                             and o.started > victim.started)
            for o in lower if o not in chosen)


def test_pick_node_prefers_the_lowest_priority_victims_then_fewest():
    low = Candidate(1, (Victim("a", 1, 0.0, (1, 0)), Victim("b", 1, 0.0, (1, 0))))
    high = Candidate(0, (Victim("c", 5, 0.0, (2, 0)),))
    assert pick_node([high, low]) == low
    fewer = Candidate(2, (Victim("d", 1, 0.0, (2, 0)),))
    assert pick_node([low, fewer]) == fewer
    assert pick_node([]) is None
