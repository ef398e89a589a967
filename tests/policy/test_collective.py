"""Collective resizes: targets snap to allowed sizes; at most one resize per cooldown."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from edl.policy.base import Decision
from edl.policy.collective import CollectiveResizes, ResizeRule, gate, snap

allowed_sets = st.lists(st.integers(1, 30), min_size=1, max_size=6, unique=True).map(
    lambda xs: tuple(sorted(xs))
)


def decision(parallelism: int, target: int, name: str = "ddp") -> Decision:
    shrink = tuple(f"pod-{i}" for i in range(max(0, parallelism - target)))
    grow = tuple(f"n{i}" for i in range(max(0, target - parallelism)))
    return Decision("default", name, parallelism, target, "plan", victim_nodes=("n1",),
                    victims=shrink, placement=grow)


@given(st.integers(0, 40), allowed_sets)
def test_snap_picks_the_largest_allowed_not_above_the_target(
    target: int, allowed: tuple[int, ...]
) -> None:
    got = snap(target, allowed)
    assert got in allowed
    if got > target:
        assert got == min(allowed) and all(a > target for a in allowed)
    else:
        assert not [a for a in allowed if got < a <= target]


@given(st.integers(1, 30), st.integers(1, 30), allowed_sets, st.floats(0, 200),
       st.one_of(st.none(), st.floats(0, 400)))
def test_gate_only_moves_to_allowed_sizes_and_respects_the_cooldown(
    parallelism: int, target: int, allowed: tuple[int, ...], cooldown: float, last: float | None
) -> None:
    now = 400.0
    out = gate(decision(parallelism, target), ResizeRule(allowed, cooldown), last, now)
    assert out.parallelism == parallelism
    if out.target != parallelism:
        assert out.target in allowed
        assert last is None or now - last >= cooldown, "resized within the cooldown"
        assert out.target <= max(target, min(allowed)), "never grows beyond the plan"
        if out.target <= target:  # (above it only when the plan is below every allowed size)
            assert len(out.placement) == max(0, out.target - parallelism)
    elif out.target != target:  # held or snapped back to its size: nobody moves
        assert out.victims == out.placement == out.victim_nodes == ()


def test_a_held_resize_says_why_and_names_no_victims() -> None:
    out = gate(decision(4, 2), ResizeRule((2, 4), 60), last_resize_at=370.0, now=400.0)
    assert out.target == 4 and out.victim_nodes == ()
    assert "held at 4, last resize 30 s ago (cooldown 60 s" in out.reason
    out = gate(decision(4, 7), ResizeRule((2, 4, 6), 60), last_resize_at=None, now=400.0)
    assert out.target == 6 and "snapped from 7" in out.reason


def test_the_memory_gates_collective_jobs_only_and_forgets_deleted_ones() -> None:
    resizes = CollectiveResizes()
    resizes.remember(("default", "ddp"), ResizeRule((2, 4), 60))
    plans = [decision(2, 5), decision(2, 5, name="ps")]
    first = resizes.apply(plans, now=0.0)
    assert [d.target for d in first] == [4, 5]
    resizes.resized(("default", "ddp"), 0.0)
    resizes.resized(("default", "ps"), 0.0)  # not collective: not remembered
    assert resizes.last_resize == {("default", "ddp"): 0.0}
    assert [d.target for d in resizes.apply([decision(4, 2)], now=59.0)] == [4]
    assert [d.target for d in resizes.apply([decision(4, 2)], now=60.0)] == [2]
    resizes.forget(("default", "ddp"))
    assert [d.target for d in resizes.apply([decision(4, 3)], now=61.0)] == [3]
