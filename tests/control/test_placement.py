"""A growth's planned nodes reach the new trainer pods as preferred node affinity, and the
scheduler then puts them where the plan did (the spreading scheduler would not)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import replace

from edl.api.names import ANNOTATION_TRAINER_PLACEMENT
from edl.control.autoscaler import Autoscaler
from edl.control.controller import Controller
from edl.control.placement import annotate, hint, prefer_node
from edl.policy.default import DefaultPolicy

NEVER = 10_000.0
HOST = "kubernetes.io/hostname"


def trainer_job(parallelism: int, annotations: dict[str, str] | None = None) -> dict:
    return {"metadata": {"name": "j-trainer", "annotations": annotations or {}},
            "spec": {"parallelism": parallelism}}


def test_a_hint_is_for_the_parallelism_it_was_written_with():
    job = trainer_job(5, {"other": "kept"})
    annotate(job, ["a", "a", "b"], 5, 12.5)
    assert job["metadata"]["annotations"]["other"] == "kept"
    got = hint(job)
    assert got is not None and got.nodes == ("a", "a", "b") and got.parallelism == 5
    job["spec"]["parallelism"] = 4  # shrunk since: the hint is stale
    assert hint(job) is None


def test_a_malformed_hint_is_no_hint():
    for text in ("not json", "[]", '{"nodes": ["a"]}', '{"parallelism": "x", "nodes": []}',
                 '{"parallelism": 3, "nodes": "abc"}', '{"parallelism": 3, "nodes": [1]}'):
        assert hint(trainer_job(3, {ANNOTATION_TRAINER_PLACEMENT: text})) is None


def test_prefer_node_adds_a_preference_and_keeps_the_pods_own_affinity():
    own = {"weight": 5, "preference": {"matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["a"]}]}}
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [], "affinity": {
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [own],
                         "requiredDuringSchedulingIgnoredDuringExecution": {"x": 1}},
        "podAntiAffinity": {"y": 2}}}}
    out = prefer_node(pod, "node-3")
    node_affinity = out["spec"]["affinity"]["nodeAffinity"]
    terms = node_affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0] == own and terms[1]["weight"] == 100
    assert terms[1]["preference"]["matchExpressions"] == [
        {"key": HOST, "operator": "In", "values": ["node-3"]}]
    assert node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] == {"x": 1}
    assert out["spec"]["affinity"]["podAntiAffinity"] == {"y": 2}
    assert len(pod["spec"]["affinity"]["nodeAffinity"][  # the input is not changed
        "preferredDuringSchedulingIgnoredDuringExecution"]) == 1


class WithoutPlacement:
    """`default`, its decisions stripped of the planned nodes (the cluster chooses)."""

    name = "default"

    def __init__(self):
        self.planned: list[str] = []

    def plan(self, jobs, resources, max_load_desired):
        decisions = DefaultPolicy().plan(jobs, resources, max_load_desired)
        self.planned += [node for d in decisions for node in d.placement]
        return [replace(d, placement=()) for d in decisions]


def grow_on_uneven_nodes(cluster, manifests, policy):
    """node-0 (8 cores, 3 used) comes first, so the plan fills it first; node-1 (16
    cores, empty) is what spreading prefers. Job "j": 1..4 trainers of 1 core."""
    cluster.add_node("node-0", {"cpu": "8", "memory": "32Gi"})
    cluster.add_node("node-1", {"cpu": "16", "memory": "64Gi"})
    cluster.create_pod({"metadata": {"name": "busy", "namespace": "default"},
                        "spec": {"nodeName": "node-0", "containers": [
                            {"name": "c", "resources": {"requests": {"cpu": "3"}}}]}})
    autoscaler = Autoscaler(cluster, policy, interval=NEVER)
    controller = Controller(cluster, autoscaler)

    async def scenario():
        stored = cluster.create_training_job(manifests.training_job("j", 1, 4, cpu="1"))
        await controller.on_add(stored)
        await asyncio.sleep(10)  # master, pserver and the first trainer run
        before = {p.name for p in await cluster.trainer_pods(stored)}
        decisions = await autoscaler.tick()
        await asyncio.sleep(10)
        after = await cluster.trainer_pods(stored)
        return decisions, [p.node for p in after if p.name not in before]

    return scenario()


def test_grown_trainers_land_on_the_planned_nodes(clock, manifests):
    from conftest import make_cluster

    cluster = make_cluster(clock, nodes=0)
    (decision,), new_nodes = clock.run(grow_on_uneven_nodes(cluster, manifests, "default"))
    assert decision.target == 4 and len(decision.placement) == 3
    assert decision.placement.count("node-0") >= 1  # the plan is first-fit: node-0 first
    assert Counter(new_nodes) == Counter(decision.placement)
    job = clock.run(cluster.get_trainer_job_by_name("default", "j-trainer"))
    assert json.loads(job["metadata"]["annotations"][ANNOTATION_TRAINER_PLACEMENT])[
        "nodes"] == list(decision.placement)


def test_without_the_hint_the_spreading_scheduler_puts_them_elsewhere(clock, manifests):
    from conftest import make_cluster

    cluster = make_cluster(clock, nodes=0)
    policy = WithoutPlacement()
    (decision,), new_nodes = clock.run(grow_on_uneven_nodes(cluster, manifests, policy))
    assert decision.target == 4 and len(new_nodes) == 3
    assert "node-0" in policy.planned  # the plan put some there; the scheduler did not
    assert new_nodes.count("node-0") == 0


def test_a_hint_is_used_once_a_later_replacement_prefers_nothing(clock, manifests):
    from conftest import make_cluster

    cluster = make_cluster(clock, nodes=0)
    clock.run(grow_on_uneven_nodes(cluster, manifests, "default"))

    def trainers():
        return {key[1]: pod for key, pod in cluster.pods.by_key.items()
                if pod.role == "trainer" and not pod.terminating}

    preferring = [name for name, pod in trainers().items()
                  if pod.manifest["spec"].get("affinity")]
    assert len(preferring) == 3
    cluster.evict_pod("default", preferring[0])

    async def settle():
        await asyncio.sleep(10)

    clock.run(settle())
    now = trainers()
    assert len(now) == 4 and preferring[0] not in now
    replacement = max(now.values(), key=lambda pod: pod.seq)  # the newest trainer
    assert replacement.name not in preferring
    assert replacement.manifest["spec"].get("affinity") is None
