"""The `default` policy: node-aware, fair, and quick to give room to pending pods."""

from __future__ import annotations

from edl.accounting import PodResources
from edl.policy import get_policy
from policy.cluster import Cluster, Job

DEFAULT = get_policy("default")
REFERENCE = get_policy("reference")
SERVICE = PodResources(3000, 3000, 3000, 3000)


def jain(values: list[int]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def tick(c, policy=DEFAULT, load: float = 0.97):
    decisions = policy.plan(c.views(), c.resources(), load)
    c.apply(decisions)
    assert c.overcommitted() == []
    return {d.name: d for d in decisions}


def uniform(nodes: int, cpu: int = 16_000, memory: int = 64_000):
    c = Cluster()
    for i in range(nodes):
        c.add_node(f"n{i:03}", cpu, memory)
    return c


def test_grows_into_free_room_evenly_and_explains() -> None:
    c = uniform(4)  # 64 cores
    for name in "abc":
        c.add_job(Job("ns", name, 1, 30, 1, cpu=2000))
    c.schedule()
    decisions = tick(c)
    # cap 97% of 64 cores = 62.08 -> 31 trainers of 2 cores: 11/10/10
    assert sorted(d.target for d in decisions.values()) == [10, 10, 11]
    assert all(d.reason.startswith("grow 1->") for d in decisions.values())
    assert "fair share" in decisions["a"].reason


def test_never_plans_a_trainer_that_fits_no_node() -> None:
    # 3 nodes x 5 cores idle = 15 cores in total, but a 6-core trainer fits nowhere
    c = uniform(3, cpu=5000)
    c.add_job(Job("ns", "wide", 1, 5, 0, cpu=6000))
    decisions = DEFAULT.plan(c.views(), c.resources(), 0.97)
    assert decisions[0].target == 1  # min-instance is an entitlement...
    assert "waiting for room" in decisions[0].reason  # ...but it waits for room
    decisions, placement = DEFAULT.plan_with_placement(c.views(), c.resources(), 0.97)
    assert placement[("ns", "wide")] == []


def test_pending_service_pods_get_room_even_when_the_aggregate_is_low() -> None:
    # Fragmentation: every node has 2 cores idle (aggregate 75% busy), a 3-core
    # service pod fits nowhere. reference never reacts; default shrinks a trainer.
    c = uniform(4, cpu=8000)
    c.add_job(Job("ns", "t", 1, 10, 4, cpu=3000))
    c.add_job(Job("ns", "u", 1, 10, 4, cpu=3000))
    c.schedule()
    assert c.resources().nodes.cpu_idle_milli == dict.fromkeys(c.nodes, 2000)
    c.add_pod(SERVICE)
    c.schedule()
    assert REFERENCE.plan(c.views(), c.resources(), 0.97)[0].target == 4
    decisions = tick(c)
    shrunk = [d for d in decisions.values() if d.target < d.parallelism]
    assert len(shrunk) == 1 and "pending pods that are not trainers" in shrunk[0].reason
    assert all(p.node for p in c.pods if p.job is None)  # the service pod is running


def test_service_scale_up_above_max_load_sheds_trainers_in_one_plan() -> None:
    c = uniform(10)  # 160 cores
    for name in "abcd":
        c.add_job(Job("ns", name, 2, 40, 2, cpu=4000))
    c.schedule()
    for _ in range(3):
        tick(c)
    assert sum(c.running().values()) > 30
    for _ in range(20):  # 60 cores of service
        c.add_pod(SERVICE)
    decisions = tick(c)
    assert all(p.node for p in c.pods if p.job is None)
    assert all(d.target < d.parallelism for d in decisions.values())
    assert (
        max(d.target for d in decisions.values()) - min(d.target for d in decisions.values()) <= 1
    )


def test_a_job_below_min_gets_room_from_the_most_fulfilled() -> None:
    # 3 nodes x (10 cores, 4 GB): 4 two-core trainers per node leave 2 cores idle on
    # each node, so the new job's 3-core trainer fits nowhere though the aggregate is fine.
    c = uniform(3, cpu=10_000, memory=4000)
    c.add_job(Job("ns", "big", 1, 12, 12, cpu=2000, memory=1000))
    c.schedule()
    c.add_job(Job("ns", "new", 1, 10, 1, cpu=3000, memory=1000))
    c.schedule()
    assert c.running() == {"big": 12, "new": 0}
    decisions = tick(c)
    assert decisions["big"].target < 12 and "below min-instance (new)" in decisions["big"].reason
    assert decisions["new"].target == 1
    assert c.running()["new"] == 1


def test_unfair_start_converges_to_equal_shares_without_overcommit() -> None:
    c = uniform(8)  # 128 cores, room for 30 trainers of 4 cores (cap 124.16)
    c.add_job(Job("ns", "early", 1, 60, 28, cpu=4000))
    c.schedule()
    for name in ("late1", "late2"):
        c.add_job(Job("ns", name, 1, 60, 1, cpu=4000))
    c.schedule()
    first = tick(c)
    assert first["early"].target < 28 and "fair share" in first["early"].reason
    for _ in range(3):
        tick(c)
    running = sorted(c.running().values())
    assert running[-1] - running[0] <= 1 and sum(running) >= 29


def test_beats_reference_on_fairness_in_a_2017_like_cluster() -> None:
    def run(policy):
        c = Cluster()
        for i in range(26):
            c.add_node(f"a{i:03}", 16_000, 128_000)
        for i in range(18):
            c.add_node(f"b{i:03}", 20_000, 128_000)
        for job in range(7):
            for _ in range(10):
                c.add_pod(PodResources(4000, 6000, 5369, 5369))
            c.add_job(Job("ns", f"job{job}", 2, 60, 2, cpu=5000, memory=8590))
            c.schedule()
            for _ in range(2):
                tick(c, policy)
        for _ in range(6):
            tick(c, policy)
        return list(c.running().values())

    reference, default = run(REFERENCE), run(DEFAULT)
    assert jain(default) >= 0.9
    assert jain(reference) < jain(default)
    assert sum(default) >= 0.9 * sum(reference)  # fairness does not cost utilisation


def test_bound_pending_trainers_are_not_placed_twice() -> None:
    c = uniform(1, cpu=4000)
    c.add_job(Job("ns", "a", 1, 10, 2, cpu=2000))
    c.schedule()  # both bound; the node is full
    views = c.views()
    bound_pending = [
        v.__class__(**{**{f: getattr(v, f) for f in v.__dataclass_fields__}, "running": 0,
                       "pending": 2, "unscheduled": 0})
        for v in views
    ]  # fmt: skip
    assert DEFAULT.plan(bound_pending, c.resources(), 1.0)[0].target == 2
    unknown = [
        v.__class__(**{**{f: getattr(v, f) for f in v.__dataclass_fields__},
                       "running": 0, "pending": 2, "unscheduled": None})
        for v in views
    ]  # fmt: skip
    # not knowing, the policy assumes they still need room: it must not grow the job
    assert DEFAULT.plan(unknown, c.resources(), 1.0)[0].target == 2


def test_gpu_trainers_only_go_where_gpus_are_free() -> None:
    c = Cluster()
    c.add_node("cpu-only", 64_000, 256_000)
    c.add_node("gpu", 64_000, 256_000, gpu=4)
    c.add_job(Job("ns", "g", 1, 8, 1, cpu=1000, gpu=1))
    c.schedule()
    decisions, placement = DEFAULT.plan_with_placement(c.views(), c.resources(), 0.97)
    # every GPU: the load cap holds back CPU headroom, never a whole device
    assert decisions[0].target == 4
    assert placement[("ns", "g")] == ["gpu", "gpu", "gpu"]
    assert "load cap" not in decisions[0].reason


def test_the_reason_names_the_load_cap_when_it_stops_a_job() -> None:
    """8 CPUs at 0.97 admit 7 one-CPU trainers while a node still has a free CPU."""
    c = uniform(2, cpu=4000)
    c.add_job(Job("ns", "a", 1, 10, 1, cpu=1000))
    c.schedule()
    decisions = tick(c)
    assert decisions["a"].target == 7
    cap = "the load cap (cluster CPU requests at max_load_desired) admits no more"
    assert cap in decisions["a"].reason, decisions["a"].reason
    decisions = tick(c)
    assert decisions["a"].target == 7
    assert decisions["a"].reason == f"keep 7: {cap} trainers (fair share 7)"


def test_makes_room_in_slots_not_in_aggregate_cores() -> None:
    # Nodes of 17 cores hold three 5-core trainers each and keep 2 cores idle.
    c = uniform(6, cpu=17_000)
    c.add_job(Job("ns", "a", 1, 18, 9, cpu=5000))
    c.add_job(Job("ns", "b", 1, 18, 9, cpu=5000))
    c.schedule()
    assert set(c.resources().nodes.cpu_idle_milli.values()) == {2000}
    for _ in range(4):  # 4 service pods of 3 cores: none fits
        c.add_pod(SERVICE)
    c.schedule()
    decisions = tick(c)
    shed = sum(d.parallelism - d.target for d in decisions.values())
    # a removed trainer leaves 5 + 2 = 7 cores on its node: two service pods each
    assert shed == 2
    assert all(p.node for p in c.pods if p.job is None)
