"""Which nodes a shrinking job gives its trainers up on (`Decision.victim_nodes`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edl.accounting import PodResources
from edl.cluster.port import TrainerPod
from edl.control.autoscaler import pick_victims
from edl.policy import get_policy
from policy.cluster import Cluster, Job

DEFAULT = get_policy("default")
REFERENCE = get_policy("reference")


def crowded() -> Cluster:
    """3 nodes x 10 cores, 9 trainers of 3 cores; idle: n000 0.5, n001 0, n002 1 core."""
    c = Cluster()
    for i in range(3):
        c.add_node(f"n{i:03}", 10_000, 64_000)
    for node, cpu in (("n000", 500), ("n001", 1000)):
        c.add_pod(PodResources(cpu, cpu, 100, 100)).node = node
    c.add_job(Job("ns", "a", 1, 12, 9, cpu=3000))
    c.schedule()
    return c


def test_a_shrink_names_nodes_where_the_freed_room_fits_the_waiting_pod_first() -> None:
    c = crowded()
    assert c.overcommitted() == [] and all(p.node for p in c.pods)
    c.add_pod(PodResources(4000, 4000, 100, 100))  # fits nowhere: at most 1 core idle
    decision = DEFAULT.plan(c.views(), c.resources(), 0.97)[0]
    assert decision.target < decision.parallelism
    # requests exceed 97 % (two trainers must go); both are named on n002, where the
    # freed room (1 idle + 2 x 3 cores) also makes the 4-core hole the pod waits for
    assert decision.parallelism - decision.target == 2 == len(decision.victims)
    assert decision.victim_nodes == ("n002",)
    nodes = {p.name: p.node for p in c.pods}
    assert {nodes[victim] for victim in decision.victims} == {"n002"}


def test_no_victims_without_a_shrink_and_none_from_reference() -> None:
    c = crowded()
    assert DEFAULT.plan(c.views(), c.resources(), 0.97)[0].victim_nodes == ()
    c.add_pod(PodResources(4000, 4000, 100, 100))
    decision = REFERENCE.plan(c.views(), c.resources(), 0.97)[0]
    assert decision.target < decision.parallelism and decision.victim_nodes == ()


def test_pick_victims_leaves_unbound_pods_to_the_job_controller() -> None:
    pods = [TrainerPod("p1", "a"), TrainerPod("p2", "b"), TrainerPod("p3", ""),
            TrainerPod("p4", "b"), TrainerPod("p5", "c")]
    assert pick_victims(pods, 2, ("b", "c")) == ["p2", "p4"]  # p3 goes first anyway
    assert pick_victims(pods, 4, ("c",)) == []
    assert pick_victims(pods, 0, ("c",)) == ["p5", "p1", "p2", "p4"]


@given(
    st.lists(st.sampled_from(["", "a", "b", "c", "d"]), max_size=12),
    st.integers(0, 12),
    st.permutations(["a", "b", "c", "d"]),
    st.integers(0, 4),
)
def test_pick_victims_takes_the_surplus_from_the_best_nodes(nodes, target, order, listed):
    pods = [TrainerPod(f"p{i:02}", node) for i, node in enumerate(nodes)]
    preference = tuple(order[:listed])
    victims = pick_victims(pods, target, preference)
    by_name = {pod.name: pod for pod in pods}
    bound = [pod for pod in pods if pod.node]
    assert len(victims) == len(set(victims))
    expected = max(0, len(pods) - target - (len(pods) - len(bound)))
    assert len(victims) == expected
    assert all(by_name[name].node for name in victims)

    def rank(node: str) -> tuple[int, str]:
        return (preference.index(node), "") if node in preference else (len(preference), node)

    kept = [pod for pod in bound if pod.name not in victims]
    if victims and kept:
        assert max(rank(by_name[n].node) for n in victims) <= min(rank(p.node) for p in kept)
