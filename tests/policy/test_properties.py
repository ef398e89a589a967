"""hypothesis properties of the scaling policies over consistent random clusters."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from edl.accounting import PodResources
from edl.policy import get_policy
from policy.cluster import Cluster, Job

POLICIES = ("default", "reference")
SHAPES = [(1000, 1000, 0), (2000, 4000, 0), (3000, 2000, 0), (500, 500, 1), (4000, 8000, 2)]
loads = st.sampled_from([0.5, 0.8, 0.97, 1.0])


@st.composite
def clusters(draw):
    """Nodes, jobs (some of fixed size) placed first-fit, non-trainer pods, and parallelism
    drift (a fixed-size job's drift is an edit of its size the Job has not seen yet)."""
    c = Cluster()
    for i in range(draw(st.integers(1, 6))):
        cpu = draw(st.sampled_from([2000, 4000, 8000, 16_000]))
        memory = draw(st.sampled_from([4000, 8000, 32_000]))
        c.add_node(f"n{i}", cpu, memory, draw(st.sampled_from([0, 0, 2, 4])))
    for _ in range(draw(st.integers(0, 6))):  # services already running
        cpu = draw(st.sampled_from([500, 1000, 3000]))
        c.add_pod(PodResources(cpu, cpu, 1000, 1000))
    c.schedule()
    for j in range(draw(st.integers(1, 5))):
        lo = draw(st.integers(1, 4))
        hi = lo if draw(st.integers(0, 4)) == 0 else draw(st.integers(lo + 1, 12))
        cpu, memory, gpu = draw(st.sampled_from(SHAPES))
        c.add_job(Job("ns", f"job{j}", lo, hi, draw(st.integers(lo, hi)), cpu, memory, gpu))
        c.schedule()
    for _ in range(draw(st.integers(0, 4))):  # services waiting for room
        cpu = draw(st.sampled_from([500, 1000, 3000]))
        c.add_pod(PodResources(cpu, cpu, 1000, 1000))
    c.schedule()
    for job in c.jobs.values():  # the Job controller may lag behind a new parallelism
        low = job.min_instance - (2 if job.min_instance == job.max_instance else 0)
        job.parallelism = draw(st.integers(max(low, 0), job.max_instance + 2))
    return c


@settings(max_examples=200, deadline=None)
@given(clusters(), loads, st.sampled_from(POLICIES))
def test_targets_stay_within_min_and_max(c, load, name) -> None:
    for decision, job in zip(
        get_policy(name).plan(c.views(), c.resources(), load), c.views(), strict=True
    ):
        assert job.min_instance <= decision.target <= job.max_instance
        assert decision.reason


@settings(max_examples=150, deadline=None)
@given(clusters(), loads, st.sampled_from(POLICIES))
def test_same_input_same_plan_in_any_job_order(c, load, name) -> None:
    views, resources = c.views(), c.resources()
    policy = get_policy(name)
    first = policy.plan(views, resources, load)
    assert policy.plan(views, resources, load) == first
    reverse = policy.plan(views[::-1], resources, load)
    assert {d.name: d.target for d in reverse} == {d.name: d.target for d in first}


@settings(max_examples=300, deadline=None)
@given(clusters(), loads)
def test_default_places_every_added_trainer_without_overcommit(c, load) -> None:
    views, resources = c.views(), c.resources()
    decisions, placement = get_policy("default").plan_with_placement(views, resources, load)
    for view, decision in zip(views, decisions, strict=True):
        if not view.elastic:  # a fixed size is the spec's, placed by the scheduler alone
            assert view.key not in placement and decision.placement == ()
            assert decision.target == view.min_instance
            continue
        nodes = placement[view.key]
        # bound pods beyond parallelism are terminating, named victims leave: neither stays
        bound = view.total - view.unbound - len(decision.victims)
        kept = min(bound, view.parallelism, view.max_instance)
        if decision.target > view.parallelism:
            assert len(nodes) == decision.target - min(kept, decision.target)
            # the new trainers' nodes (their preferred nodes): one each, planned last
            grown = decision.target - view.parallelism
            assert len(decision.placement) == grown
            assert list(decision.placement) == nodes[len(nodes) - len(decision.placement):]
        else:
            assert decision.placement == ()
        assert len(nodes) <= max(0, decision.target - kept)
    assert_no_node_overcommitted(views, placement, resources)


def assert_no_node_overcommitted(views, placement, resources) -> None:
    """The trainers a plan placed fit each node's idle room (also used by goodput's tests)."""
    taken = {name: [0, 0, 0] for name in resources.nodes.cpu_idle_milli}
    for view in views:
        for node in placement.get(view.key, ()):
            taken[node][0] += view.cpu_request_milli
            taken[node][1] += view.memory_request_mega
            taken[node][2] += view.gpu_request
    for name, (cpu, memory, gpu) in taken.items():
        assert cpu <= max(0, resources.nodes.cpu_idle_milli[name])
        assert memory <= max(0, resources.nodes.memory_free_mega[name])
        assert gpu <= max(0, resources.nodes.gpu_free[name])


@settings(max_examples=300, deadline=None)
@given(clusters(), loads)
def test_default_keeps_cpu_within_max_load_and_gpus_within_the_total(c, load) -> None:
    views, resources = c.views(), c.resources()
    decisions = get_policy("default").plan(views, resources, load)

    def requests(counts, per, base):
        return base + sum((n - v.total) * per(v) for n, v in zip(counts, views, strict=True))

    # a fixed-size job's size is its guarantee, not the plan's choice: the same on both sides
    before_counts = [v.parallelism if v.elastic else d.target for v, d in zip(views, decisions,
                                                                             strict=True)]
    after_counts = [d.target for d in decisions]
    # CPU within max load; GPUs within the total (the cap never holds back a whole device)
    for per, base, cap in (
        (lambda v: v.cpu_request_milli, resources.cpu_request_milli,
         int(resources.cpu_total_milli * load)),
        (lambda v: v.gpu_limit, resources.gpu_limit, resources.gpu_total),
    ):
        before = requests(before_counts, per, base)
        after = requests(after_counts, per, base)
        assert after <= (cap if before <= cap else before)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(2, 5),  # identical jobs
    st.sampled_from(SHAPES[:3]),
    st.integers(1, 3),
    st.lists(st.sampled_from([4000, 8000, 16_000]), min_size=1, max_size=5),
    loads,
)
def test_equal_jobs_end_within_one_trainer_when_capacity_binds(count, shape, lo, nodes, load):
    c = Cluster()
    for i, cpu in enumerate(nodes):
        c.add_node(f"n{i}", cpu, 64_000)
    for j in range(count):
        c.add_job(Job("ns", f"job{j}", lo, 40, lo, *shape))
    c.schedule()
    decisions = get_policy("default").plan(c.views(), c.resources(), load)
    targets = [d.target for d in decisions]
    assert max(targets) - min(targets) <= 1


@settings(max_examples=200, deadline=None)
@given(clusters(), loads)
def test_default_never_grows_and_shrinks_a_job_in_one_plan(c, load) -> None:
    for decision in get_policy("default").plan(c.views(), c.resources(), load):
        verb = decision.reason.split(" ", 1)[0]
        expected = {1: "grow", -1: "shrink", 0: "keep"}[
            (decision.target > decision.parallelism) - (decision.target < decision.parallelism)
        ]
        assert verb == expected, decision
        assert not ("grow" in decision.reason and "shrink" in decision.reason)
