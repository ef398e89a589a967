"""The planner's shortcuts give what the long way gives: `Room.take_many` against
repeated `Room.take`, growth in whole batches against growth one trainer at a time
(the batch is only kept when nothing stops a job), and a waiting pod's node found
without the preemption search against the search's."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from edl.accounting.eligibility import NO_CONSTRAINTS, NodeFacts, PodConstraints
from edl.accounting.types import Nodes
from edl.policy import get_policy, steps
from edl.policy.preempt import Preemptor
from edl.policy.room import Eligible, Room
from policy.test_properties import clusters

rooms = st.lists(
    st.tuples(st.integers(0, 8000), st.integers(0, 16000), st.integers(0, 4),
              st.integers(0, 6), st.booleans(), st.booleans()),
    min_size=1, max_size=12,
)


def make_room(spec: list[tuple[int, int, int, int, bool, bool]]) -> tuple[Room, list, list]:
    names = [f"n{i:02d}" for i in range(len(spec))]
    nodes = Nodes(
        cpu_idle_milli={n: s[0] for n, s in zip(names, spec, strict=True)},
        memory_free_mega={n: s[1] for n, s in zip(names, spec, strict=True)},
        gpu_free={n: s[2] for n, s in zip(names, spec, strict=True)},
        extended_free={n: {"pods": s[3]} for n, s in zip(names, spec, strict=True)},
        facts={n: NodeFacts(n) for n in names},
    )
    allowed = [s[4] for s in spec]
    prefer = [a and s[5] for a, s in zip(allowed, spec, strict=True)]
    return Room(nodes, ["pods"]), allowed, prefer


@settings(max_examples=200, deadline=None)
@given(rooms, st.sampled_from([1000, 1500, 3000]), st.sampled_from([0, 1]),
       st.integers(0, 30), st.integers(0, 3))
def test_take_many_is_repeated_take(spec, cpu, gpu, count, masks):
    """Same nodes, same order, same room left, whatever the masks."""
    room, allowed_flags, prefer_flags = make_room(spec)
    allowed = Eligible(0, NO_CONSTRAINTS, allowed_flags) if masks & 1 else None
    prefer = (Eligible(1, PodConstraints(node_selector=(("a", "b"),)), prefer_flags)
              if masks & 2 else None)
    shape = (cpu, 2000, gpu, 1)
    one_by_one = copy.deepcopy(room)
    expected = []
    for _ in range(count):
        node = one_by_one.take(shape, allowed, prefer)
        if node < 0:
            break
        expected.append(node)
    assert room.take_many(shape, count, allowed, prefer) == expected
    assert room.free == one_by_one.free
    # and a later single take continues where both left off
    assert room.take(shape, allowed, prefer) == one_by_one.take(shape, allowed, prefer)


@contextlib.contextmanager
def one_at_a_time() -> Iterator[None]:
    """Growth never takes whole batches (one trainer at a time)."""
    whole = steps._grow_whole
    steps._grow_whole = lambda *args: False  # type: ignore[assignment]
    try:
        yield
    finally:
        steps._grow_whole = whole


@settings(max_examples=200, deadline=None)
@given(clusters(), st.sampled_from([0.5, 0.8, 0.97, 1.0]))
def test_growth_in_batches_gives_the_targets_of_one_at_a_time(c, load):
    """`default` with batched growth plans the same targets as with growth one trainer
    at a time, least fulfilled job first (where a batch would change them, none is
    kept)."""
    views, resources = c.views(), c.resources()
    batched = get_policy("default").plan(views, resources, load)
    with one_at_a_time():
        single = get_policy("default").plan(views, resources, load)
    assert [d.target for d in batched] == [d.target for d in single]
    assert [d.reason for d in batched] == [d.reason for d in single]


@settings(max_examples=200, deadline=None)
@given(rooms, st.sampled_from([1000, 1500, 3000]), st.booleans(),
       st.lists(st.tuples(st.integers(0, 11), st.integers(0, 3000)), max_size=8))
def test_first_fit_then_first_reachable_is_the_searchs_choice(spec, cpu, masked, events):
    """A waiting pod's node without the preemption search (free room first-fit, else the
    first node with free + coming room) is the search's, round after round, while room is
    taken and pods leave."""
    room, allowed_flags, _ = make_room(spec)
    allowed = Eligible(0, NO_CONSTRAINTS, allowed_flags) if masked else None
    shape = (cpu, 2000, 0, 1)
    for node, leaving in [(0, 0), *events]:
        if leaving and node < room.count:  # a pod leaves: its room is coming
            room.release(node, (leaving, 1000, 0, 1))
        rescue = Preemptor(room, []).find(shape, lambda index, extra: None, allowed)
        expected = -1 if rescue is None else rescue.node
        got = room.take(shape, allowed)
        if got < 0:
            got = room.first_reachable(shape, allowed)
            if got >= 0:
                room.take_at(got, shape)
        assert got == expected
