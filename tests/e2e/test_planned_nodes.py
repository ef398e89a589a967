"""A growth's planned nodes against the real kube-scheduler: every trainer edl creates
for a planned growth carries a preferred node (node affinity on kubernetes.io/hostname)
and the upstream scheduler binds it there, although its spreading scores alone would
spread the new trainers over the four equal nodes (the plan fills the first node with
room first)."""

from __future__ import annotations

import json
from collections import Counter

from e2e.helpers import trainingjob, wait_trainers
from e2e.rest import Rest

PLACEMENT = "edl.dev/trainer-placement"


def preferred_node(pod: dict) -> str | None:
    affinity = (pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    terms = affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    for term in terms:
        for expression in term["preference"].get("matchExpressions") or []:
            if expression["key"] == "kubernetes.io/hostname" and expression["operator"] == "In":
                assert term["weight"] == 100 and len(expression["values"]) == 1
                assert not affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
                return str(expression["values"][0])
    return None


def test_grown_trainers_are_bound_to_their_planned_nodes(
    rest: Rest, namespace: str, start_controller
) -> None:
    start_controller("replica-a")
    # Not elastic at first: master, pservers and one trainer are placed before any plan
    # grows the job, so nothing else competes for the room the plan finds.
    rest.create(trainingjob("planned", min_instance=1, max_instance=1, trainer_cpu="500m"),
                namespace)
    wait_trainers(rest, namespace, "planned", 1)
    rest.merge("TrainingJob", "planned", {"spec": {"trainer": {"max-instance": 6}}}, namespace)
    wait_trainers(rest, namespace, "planned", 6, timeout=120)

    pods = rest.list("Pod", namespace, "edl.dev/job=planned,edl.dev/role=trainer")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    planned = {p["metadata"]["name"]: preferred_node(p) for p in live}
    grown = {name: node for name, node in planned.items() if node is not None}
    assert len(grown) == 5, planned  # the first trainer predates the plan: no preference
    bound = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in live}
    assert all(bound[name] == node for name, node in grown.items()), (grown, bound)
    print("planned:", sorted(grown.values()), "all bound:", sorted(bound.values()))
    # spreading alone never stacks 3 of 5 new 500m pods on one of four equal 4-core nodes
    assert max(Counter(grown.values()).values()) >= 3, grown
    job = rest.get("Job", "planned-trainer", namespace)
    hint = json.loads(job["metadata"]["annotations"][PLACEMENT])
    assert hint["parallelism"] == 6 and Counter(hint["nodes"]) == Counter(grown.values())
