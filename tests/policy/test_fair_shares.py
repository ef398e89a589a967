"""Water-filling fair shares over a budget and per-shape pools (`edl.policy.fairshare`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from edl.policy import get_policy
from edl.policy.fairshare import Demand, fair_shares

if "policy_cluster" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "policy_cluster", Path(__file__).with_name("cluster.py")
    )
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["policy_cluster"] = _module
    _spec.loader.exec_module(_module)
Cluster, Job = sys.modules["policy_cluster"].Cluster, sys.modules["policy_cluster"].Job


@st.composite
def problems(draw):
    jobs = []
    for _ in range(draw(st.integers(1, 6))):
        lo = draw(st.integers(0, 4))
        jobs.append(Demand(lo, draw(st.integers(lo, 30)), draw(st.sampled_from([1, 3, 12])),
                           draw(st.sampled_from([0, 2])), draw(st.sampled_from([0, 0, 1]))))
    budget = (draw(st.integers(0, 300)), draw(st.integers(0, 200)), draw(st.integers(0, 20)))
    pools = []
    for _ in range(draw(st.integers(0, 3))):
        members = draw(st.lists(st.booleans(), min_size=len(jobs), max_size=len(jobs)))
        pools.append((members, (draw(st.integers(0, 200)), draw(st.integers(0, 200)),
                                draw(st.integers(0, 20)))))
    return jobs, budget, pools


def use(jobs, shares, members=None):
    return [
        sum(
            (share * (job.cpu, job.memory, job.gpu)[d])
            for i, (job, share) in enumerate(zip(jobs, shares, strict=True))
            if members is None or members[i]
        )
        for d in range(3)
    ]


@settings(max_examples=400, deadline=None)
@given(problems())
def test_shares_respect_min_max_and_every_pool(problem) -> None:
    jobs, budget, pools = problem
    shares = fair_shares(jobs, *budget, pools=pools)
    mins = [job.min_instance for job in jobs]
    for job, share in zip(jobs, shares, strict=True):
        assert job.min_instance <= share <= job.max_instance
    for members, limit in [(None, budget), *pools]:
        used, floor = use(jobs, shares, members), use(jobs, mins, members)
        for d in range(3):
            # beyond the mins (an entitlement), nothing is handed out past a budget
            assert used[d] <= max(limit[d], floor[d])


@settings(max_examples=400, deadline=None)
@given(problems())
def test_no_job_below_max_could_take_one_more_unit(problem) -> None:
    """Pareto: every job short of its max is stopped by some budget it belongs to."""
    jobs, budget, pools = problem
    shares = fair_shares(jobs, *budget, pools=pools)
    for i, job in enumerate(jobs):
        if shares[i] >= job.max_instance or (job.cpu, job.memory, job.gpu) == (0, 0, 0):
            continue
        more = list(shares)
        more[i] += 1
        blocked = False
        for members, limit in [(None, budget), *pools]:
            if members is not None and not members[i]:
                continue
            used = use(jobs, more, members)
            unit = (job.cpu, job.memory, job.gpu)
            if any(unit[d] > 0 and used[d] > limit[d] for d in range(3)):
                blocked = True
        assert blocked, (i, shares)


def test_a_share_counts_only_nodes_the_shape_fits_on() -> None:
    """8-core nodes only: a 12-core job's share is its min; the 3-core job is not
    held back for it (its share is what the nodes hold), and nobody is shrunk."""
    c = Cluster()
    for i in range(6):
        c.add_node(f"s{i}", 8000, 32_000)
    c.add_job(Job("ns", "narrow", 1, 40, 12, cpu=3000, memory=1000))
    c.add_job(Job("ns", "wide", 1, 10, 1, cpu=12_000, memory=1000))
    c.schedule()
    decisions = {d.name: d for d in get_policy("default").plan(c.views(), c.resources(), 1.0)}
    assert decisions["narrow"].target == 12  # 2 per node: all the nodes hold
    assert decisions["narrow"].victims == ()
    assert decisions["wide"].target == 1 and decisions["wide"].victims == ()
    assert "min-instance" in decisions["wide"].reason  # it waits; nothing is shed for it
