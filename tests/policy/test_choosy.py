"""Max-min fairness under placement constraints: wide jobs move off the only nodes a
narrow job can use, jobs of one quota share it, and targets follow what can land."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests.policy.test_constraints import node, plan, pod, trainer_pods, trainer_spec, view

from edl.accounting import pod_request
from edl.accounting.eligibility import constraints_of
from edl.policy import JobView, Trainer


def pool_spec(cpu: str, pools: list[str]) -> dict:
    spec = trainer_spec(cpu=cpu)
    spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "pool", "operator": "In", "values": sorted(pools)}]}]}}}
    return spec


def pending_view(name: str, spec: dict, lo: int, hi: int, trainers=(), parallelism=None,
                 namespace: str = "default") -> JobView:
    """A job with `trainers` bound and the rest of its parallelism pending."""
    count = lo if parallelism is None else parallelism
    return JobView.from_pod_resources(
        namespace, name, min_instance=lo, max_instance=hi, parallelism=count,
        per_pod=pod_request({"spec": spec}), total=max(count, len(trainers)),
        running=len(trainers), pending=max(0, count - len(trainers)),
        unscheduled=max(0, count - len(trainers)), trainers=tuple(trainers),
        constraints=constraints_of(spec))


def test_a_wide_job_at_its_min_moves_off_the_only_node_a_narrow_job_can_use():
    """`wide` (4, its min, on a1; its namespace quota admits no more) could run on b1;
    `narrow` may use only a1 and holds none of its min. make_room may not take `wide`
    below its min; relocation names one of its trainers on a1 and holds b1 for it, and
    in the next plan it grows back onto b1 while `narrow`'s trainer lands on a1."""
    nodes = [node("a1", labels={"pool": "a"}), node("b1", labels={"pool": "b"})]
    wide_spec, narrow_spec = pool_spec("2", ["a", "b"]), pool_spec("2", ["a"])

    def quota(used: int) -> dict:
        return {"metadata": {"name": "cap", "namespace": "w"},
                "spec": {"hard": {"requests.cpu": "8"}},
                "status": {"used": {"requests.cpu": str(used)}}}

    wide = view("wide", wide_spec, 4, 8, placed=["a1"] * 4, namespace="w")
    narrow = pending_view("narrow", narrow_spec, 1, 4)
    first = plan(nodes, trainer_pods(wide, wide_spec), [wide, narrow], quotas=[quota(8)])
    assert first["wide"].target == 3 and first["wide"].victim_nodes == ("a1",)
    assert "moved off nodes narrow alone can use" in first["wide"].reason
    assert first["narrow"].target == 1
    # the victim is gone, narrow's trainer is bound on a1: wide grows back onto b1
    moved = view("wide", wide_spec, 4, 8, placed=["a1"] * 3, namespace="w")
    narrow = view("narrow", narrow_spec, 1, 4, placed=["a1"])
    pods = trainer_pods(moved, wide_spec) + trainer_pods(narrow, narrow_spec)
    second = plan(nodes, pods, [moved, narrow], quotas=[quota(6)])
    assert second["wide"].target == 4 and second["wide"].placement == ("b1",)


def test_growth_prefers_nodes_no_narrower_job_wants():
    nodes = [node("a1", labels={"pool": "a"}), node("b1", labels={"pool": "b"})]
    wide_spec, narrow_spec = pool_spec("2", ["a", "b"]), pool_spec("2", ["a"])
    wide = view("wide", wide_spec, 1, 4, placed=["b1"])
    narrow = view("narrow", narrow_spec, 1, 4, placed=["a1"])
    pods = trainer_pods(wide, wide_spec) + trainer_pods(narrow, narrow_spec)
    decisions = plan(nodes, pods, [wide, narrow])
    assert set(decisions["wide"].placement) == {"b1"}
    assert set(decisions["narrow"].placement) == {"a1"}


def test_trainers_that_fit_nowhere_leave_the_target_above_min():
    """4 running, 4 pending that fit no node, nothing to take: the target drops to 4
    (never below min), instead of pods left Pending for ever."""
    spec = trainer_spec(cpu="2")
    trainers = [Trainer(f"job-{i}", "n1") for i in range(4)]
    job = pending_view("job", spec, 2, 8, trainers, parallelism=8)
    pods = [pod(t.name, t.node, cpu="2") for t in trainers]
    decision = plan([node("n1")], pods, [job])["job"]
    assert decision.target == 4 and "the target follows what can land" in decision.reason
    starving = pending_view("job", spec, 6, 8, trainers, parallelism=8)
    assert plan([node("n1")], pods, [starving])["job"].target == 6


POOLS = ("a", "b", "c")


@st.composite
def constrained_cluster(draw):
    """Two nodes per pool (4 cores); jobs that may use random pools, trainers of 1 or
    2 cores placed on random nodes they may use, where they fit."""
    nodes = {f"{p}{i}": p for p in POOLS for i in (1, 2)}
    free = dict.fromkeys(nodes, 4000)
    jobs = []
    for j in range(draw(st.integers(2, 4))):
        pools = draw(st.sets(st.sampled_from(POOLS), min_size=1))
        cpu = draw(st.sampled_from([1000, 2000]))
        placed = []
        for _ in range(draw(st.integers(0, 6))):
            options = sorted(n for n, p in nodes.items() if p in pools and free[n] >= cpu)
            if not options:
                break
            chosen = draw(st.sampled_from(options))
            free[chosen] -= cpu
            placed.append(chosen)
        lo = draw(st.integers(1, min(7, len(placed) + 2)))  # below, at or above its min
        jobs.append((f"job{j}", sorted(pools), cpu, lo, placed))
    return nodes, free, jobs


NODES = {f"{p}{i}": p for p in POOLS for i in (1, 2)}


@settings(max_examples=200, deadline=None)
@given(constrained_cluster())
@example((NODES, {"a1": 0, "a2": 0, "b1": 4000, "b2": 4000, "c1": 4000, "c2": 4000},
          [("job0", ["a"], 1000, 1, []), ("job1", ["a"], 1000, 4, ["a1"] * 4),
           ("job2", ["a", "b"], 2000, 2, ["a2", "a2"])]))  # job2 at its min: moved
@example((NODES, {"a1": 4000, "a2": 4000, "b1": 0, "b2": 0, "c1": 4000, "c2": 4000},
          [("job0", ["a", "b"], 2000, 2, ["b1", "b2"]),
           ("job1", ["b"], 1000, 5, ["b1", "b1", "b2", "b2"])]))
@example((NODES, {"a1": 4000, "a2": 4000, "b1": 0, "b2": 0, "c1": 0, "c2": 3000},
          [("job0", ["b", "c"], 2000, 5, ["b1", "b1", "b2", "c1", "c1"]),
           ("job1", ["b"], 1000, 1, []), ("job2", ["b"], 2000, 1, ["b2"]),
           ("job3", ["c"], 1000, 3, ["c2"])]))  # c2's room is job3's (below its min)
def test_no_starvation_while_movable_trainers_exist(state):
    """A job below its min on full nodes, while another job holds a trainer there that
    has free room elsewhere (room no other job below its min may use): the plan names
    a victim on that job's nodes."""
    nodes, free, jobs = state
    views, pods, specs = [], [], {}
    for name, pools, cpu, lo, placed in jobs:
        spec = specs[name] = pool_spec(f"{cpu}m", pools)
        trainers = [Trainer(f"{name}-{i}", n) for i, n in enumerate(placed)]
        views.append(pending_view(name, spec, lo, 8, trainers,
                                  parallelism=max(lo, len(placed))))
        pods += [{**p, "spec": {**p["spec"], "nodeName": t.node}}
                 for p, t in zip(trainer_pods(views[-1], spec), trainers, strict=True)]
    decisions = plan([node(n, cpu=4, labels={"pool": p}) for n, p in nodes.items()], pods,
                     views)
    for name, pools, cpu, lo, placed in jobs:
        mine = {n for n, p in nodes.items() if p in pools}
        if len(placed) >= lo or any(free[n] >= cpu for n in mine):
            continue  # not starving, or room is free for it already
        movable = any(  # an elastic job at or above its min, with room outside
            other != name and len(there) > 1 and other_lo <= len(there) and other_lo < 8
            and any(nodes[n] in other_pools and n not in mine and free[n] >= other_cpu
                    and not any(nodes[n] in pools_k for k, pools_k, _, lo_k, placed_k in jobs
                                if k != name and len(placed_k) < lo_k)
                    for n in nodes)
            and any(n in mine for n in there) and other_cpu >= cpu
            for other, other_pools, other_cpu, other_lo, there in jobs
        )
        if movable:
            victims = {n for d in decisions.values() for n in d.victim_nodes}
            assert victims & mine, (name, decisions)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 4), st.integers(3, 12), st.lists(st.integers(0, 8), min_size=4,
                                                        max_size=4))
def test_equal_jobs_of_one_quota_end_within_one_trainer(jobs, hard, start):
    """Equal jobs sharing a namespace quota of `hard` cores (1-core trainers), started
    first come, first served: a few plans later each holds within one trainer of the
    others (pods shed leave before the next plan)."""
    spec = trainer_spec()
    names = [f"j{i}" for i in range(jobs)]
    placed = {}
    used = 0
    for name, want in zip(names, start, strict=False):
        count = max(1, min(want, hard - used - (jobs - len(placed) - 1)))
        placed[name] = count
        used += count
    nodes = [node("n1", cpu=32), node("n2", cpu=32)]
    for _ in range(6):
        views, pods = [], []
        for name in names:
            where = ["n1" if i % 2 == 0 else "n2" for i in range(placed[name])]
            v = view(name, spec, 1, 10, placed=where, namespace="ml")
            views.append(v)
            pods += trainer_pods(v, spec)
        quota = {"metadata": {"name": "team", "namespace": "ml"},
                 "spec": {"hard": {"requests.cpu": str(hard)}},
                 "status": {"used": {"requests.cpu": str(sum(placed.values()))}}}
        decisions = plan(nodes, pods, views, quotas=[quota])
        placed = {name: decisions[name].target for name in names}
        assert sum(placed.values()) <= max(hard, jobs)
    assert max(placed.values()) - min(placed.values()) <= 1, placed
