"""The goodput policy keeps every guarantee of `default` (hypothesis, random curves)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from edl.policy import get_policy
from edl.policy.base import Scaling
from edl.policy.goodput import GoodputPolicy
from edl.throughput.curve import PointsCurve, UslCurve
from policy.cluster import Cluster, Job
from policy.test_properties import assert_no_node_overcommitted, clusters, loads

CURVES = [
    UslCurve(100.0),
    UslCurve(50.0, 0.3),
    UslCurve(20.0, 0.002, 0.00002),
    UslCurve(30.0, 0.03, 0.002),
    PointsCurve(((1, 40.0), (4, 150.0), (8, 260.0), (16, 270.0))),
]


@st.composite
def scaled_views(draw):
    c = draw(clusters())
    views = []
    for view in c.views():
        if draw(st.booleans()):
            scaling = Scaling(
                draw(st.sampled_from(CURVES)),
                join_cost_s=draw(st.sampled_from([0.0, 30.0])),
                since_grow_s=draw(st.one_of(st.none(), st.floats(0, 600))),
                since_shrink_s=draw(st.one_of(st.none(), st.floats(0, 600))),
            )
            view = dataclasses.replace(view, scaling=scaling)
        views.append(view)
    return views, c.resources()


@settings(max_examples=200, deadline=None)
@given(scaled_views(), loads)
def test_goodput_places_every_added_trainer_without_overcommit(state, load) -> None:
    views, resources = state
    decisions, placement = GoodputPolicy().plan_with_placement(views, resources, load)
    for view, decision in zip(views, decisions, strict=True):
        assert view.min_instance <= decision.target <= view.max_instance
        assert decision.reason
        kept = min(view.total - view.unbound, view.parallelism, view.max_instance)
        if decision.target > view.parallelism and view.elastic:  # fixed: the scheduler's
            assert len(placement[view.key]) == decision.target - min(kept, decision.target)
    assert_no_node_overcommitted(views, placement, resources)


@settings(max_examples=200, deadline=None)
@given(scaled_views(), loads)
def test_goodput_keeps_cpu_within_max_load_and_never_grows_and_shrinks(state, load) -> None:
    views, resources = state
    decisions = get_policy("goodput").plan(views, resources, load)
    cap = int(resources.cpu_total_milli * load)

    def requests(counts):
        return resources.cpu_request_milli + sum(
            (n - v.total) * v.cpu_request_milli for n, v in zip(counts, views, strict=True)
        )

    # a fixed-size job's size is its guarantee, not the plan's choice: the same on both sides
    before = requests([v.parallelism if v.elastic else d.target
                       for v, d in zip(views, decisions, strict=True)])
    after = requests([d.target for d in decisions])
    assert after <= (cap if before <= cap else before)
    for view, decision in zip(views, decisions, strict=True):
        if not view.elastic:
            assert decision.target == view.min_instance
            continue
        verb = decision.reason.split(" ", 1)[0]
        expected = {1: "grow", -1: "shrink", 0: "keep"}[
            (decision.target > decision.parallelism) - (decision.target < decision.parallelism)
        ]
        assert verb == expected, decision


@settings(max_examples=100, deadline=None)
@given(scaled_views(), loads)
def test_goodput_same_plan_in_any_job_order(state, load) -> None:
    views, resources = state
    first = GoodputPolicy().plan(views, resources, load)
    reverse = GoodputPolicy().plan(views[::-1], resources, load)
    assert {d.name: d.target for d in reverse} == {d.name: d.target for d in first}


def _scheduled(nodes: int, node_cpu: int, *jobs: Job) -> Cluster:
    c = Cluster()
    for i in range(nodes):
        c.add_node(f"n{i}", node_cpu, 64_000)
    for job in jobs:
        c.add_job(job)
    c.schedule()
    return c


def _with_scaling(c: Cluster, scaling: dict[str, Scaling]) -> list:
    return [dataclasses.replace(v, scaling=scaling[v.name]) for v in c.views()]


def test_goodput_explains_its_share() -> None:
    c = _scheduled(
        2, 16_000, Job("ns", "flat", 1, 30, 2, 1000, 1000), Job("ns", "wide", 1, 30, 2, 1000, 1000)
    )
    views = _with_scaling(c, {
        "flat": Scaling(CURVES[4], join_cost_s=30.0), "wide": Scaling(CURVES[2], join_cost_s=30.0)
    })
    decisions = {d.name: d for d in GoodputPolicy().plan(views, c.resources(), 0.97)}
    assert decisions["wide"].target > decisions["flat"].target
    for decision in decisions.values():
        assert "goodput share" in decision.reason and "curve:" in decision.reason


def _flat_and_linear(since_grow_s: float | None) -> dict[str, int]:
    """A full cluster: `flat` holds 20 trainers (nothing gained beyond 8), `linear` 12
    (each trainer a large relative gain; above its fairness floor of 8). Targets goodput
    plans for them."""
    flat, linear = Job("ns", "flat", 1, 40, 20), Job("ns", "linear", 1, 16, 12)
    c = _scheduled(4, 8_000, flat, linear)
    views = _with_scaling(c, {
        "flat": Scaling(CURVES[4], since_grow_s=since_grow_s), "linear": Scaling(CURVES[0])
    })
    return {d.name: d.target for d in GoodputPolicy().plan(views, c.resources(), 1.0)}


def test_goodput_moves_trainers_that_add_nothing_to_a_job_they_speed_up() -> None:
    targets = _flat_and_linear(since_grow_s=None)
    # Fulfillment would keep flat's 20 (after giving one it is less fulfilled than
    # linear); by marginal value its trainers beyond the plateau go to linear.
    assert targets["flat"] < 20
    assert targets["linear"] == 12  # it grows next plan, once the room is really free


def test_goodput_does_not_take_back_trainers_within_the_cooldown_after_a_grow() -> None:
    assert _flat_and_linear(since_grow_s=10.0)["flat"] == 20


def test_goodput_defers_a_growth_too_small_to_be_worth_a_resize() -> None:
    def plan(policy, held: int) -> tuple[int, str]:
        # ten 10-core nodes, 3-core trainers: the budget holds 33, the nodes 30
        c = _scheduled(10, 10_000, Job("ns", "big", 1, 40, held, 3000, 1000))
        views = _with_scaling(c, {"big": Scaling(CURVES[0])})
        (decision,) = policy.plan(views, c.resources(), 1.0)
        return decision.target, decision.reason

    # the share (33) is worth its resize, but only one trainer fits now: +3 %
    assert plan(get_policy("default"), 29)[0] == 30
    target, reason = plan(GoodputPolicy(), 29)
    assert target == 29 and "grows in one step" in reason
    # room for six: +24 %, made at once
    assert plan(GoodputPolicy(), 24)[0] == 30


def test_goodput_does_not_shrink_a_job_within_its_cooldown_for_a_job_below_its_floor() -> None:
    """`a` was shrunk 10 s ago (its cooldown holds it at 30); `b` holds 2 of a floor of
    8. Both levels are -inf (not a donor / most in need): the cooldown must win, or `a`
    is shrunk again every tick of its cooldown (each a resize)."""
    c = _scheduled(4, 8_000, Job("ns", "a", 1, 40, 30), Job("ns", "b", 1, 40, 2))

    def target_of_a(since_shrink_s: float | None) -> int:
        views = _with_scaling(c, {
            "a": Scaling(CURVES[0], since_shrink_s=since_shrink_s), "b": Scaling(CURVES[0])
        })
        return {d.name: d.target for d in GoodputPolicy().plan(views, c.resources(), 1.0)}["a"]

    assert target_of_a(since_shrink_s=None) < 30  # out of its cooldown: it gives
    assert target_of_a(since_shrink_s=10.0) == 30


def test_goodput_never_takes_a_donor_below_its_goodput_share() -> None:
    """Ten 10-core nodes hold 30 trainers of 3 cores, the budget 33: `t`'s share (15)
    does not fit beside `d`'s (18, what it holds). Rebalancing finds `t` room only by
    taking `d` under the share the allocation gave it (a trainer at a time, a resize
    each); it must not. Held above its share, `d` still gives down to it."""
    def targets(d_held: int, t_held: int) -> dict[str, int]:
        c = _scheduled(10, 10_000, Job("ns", "d", 1, 40, d_held, 3000, 1000),
                       Job("ns", "t", 1, 40, t_held, 3000, 1000))
        views = _with_scaling(c, {"d": Scaling(CURVES[0]), "t": Scaling(CURVES[0])})
        decisions = GoodputPolicy().plan(views, c.resources(), 1.0)
        assert "goodput share 18" in next(d.reason for d in decisions if d.name == "d")
        return {d.name: d.target for d in decisions}

    assert targets(18, 12) == {"d": 18, "t": 12}
    assert targets(26, 4)["d"] == 18


@settings(max_examples=200, deadline=None)
@given(scaled_views(), loads)
def test_rebalancing_never_takes_a_donor_below_its_goodput_share(state, load) -> None:
    """A job shrunk to give room (or budget) to jobs below their goodput share ends at
    or above its own share: the allocation already priced what it keeps."""
    import re

    views, resources = state
    for decision in GoodputPolicy().plan(views, resources, load):
        found = re.search(r"below their goodput share \(this job's share: (\d+)\)",
                          decision.reason)
        if found:
            assert decision.target >= int(found.group(1)), decision.reason


def test_the_cooldown_after_a_grow_follows_the_job_s_measured_pause() -> None:
    """`flat` was grown 90 s (then 45 s) ago. Unknown pause: the 120 s cooldown holds its
    trainers. A measured live pause (0.15 s) needs only the 30 s floor, so its useless
    trainers move; a measured restart pause (40 s) keeps the full cooldown."""
    def flat_target(pause: float | None, since: float = 90.0) -> int:
        flat, linear = Job("ns", "flat", 1, 40, 20), Job("ns", "linear", 1, 16, 12)
        c = _scheduled(4, 8_000, flat, linear)
        measured = {} if pause is None else {
            "resize_pause_s": pause, "pause_source": "measured over 2 resizes"}
        views = _with_scaling(c, {
            "flat": Scaling(CURVES[4], since_grow_s=since, **measured),
            "linear": Scaling(CURVES[0]),
        })
        return {d.name: d.target for d in GoodputPolicy().plan(views, c.resources(), 1.0)}["flat"]

    assert flat_target(None) == 20
    assert flat_target(40.0) == 20
    assert flat_target(0.15) < 20
    assert flat_target(40.0, since=45.0) == 20
    assert flat_target(0.15, since=45.0) < 20
