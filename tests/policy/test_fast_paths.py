"""The planner's fast paths give what the plain ones give: first fit over a mask's node
list against a scan of every node, eligibility kept across plans against every node
judged afresh (and judged again once a node's facts change), pool budgets taken
per trainer shape against per kind of trainer, and the water-filling's unit per job
over the rows it uses against the whole column."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from edl.accounting import NodeCapacity, PodResources, ResourceLedger
from edl.accounting.eligibility import (
    NO_CONSTRAINTS,
    NodeFacts,
    PodConstraints,
    Requirement,
    Taint,
    Term,
    Toleration,
)
from edl.accounting.types import ClusterResource
from edl.policy import JobView, Trainer
from edl.policy.fairshare import _one_unit_each
from edl.policy.plan_state import build_plans
from edl.policy.room import Eligible, Room, extra_dimensions
from edl.policy.shares import _per_node, _pools, _trainer_nodes, usable_room
from policy.test_batched_room import make_room, rooms

TAINT = Taint("dedicated", "ml", "NoSchedule")
TOLERATE = (Toleration("dedicated", "Exists", "", ""),)
POOLS = ("a", "b", "c")
SHAPES = [(1000, 2000, 0), (2000, 4000, 0), (3000, 4000, 0), (2000, 8000, 1)]


def naive_take(room_free, allowed, prefer, shape) -> int:
    """One pod's node by scanning every node from the first: preferred ones, then the
    rest it may use (what a cursor-less first fit gives)."""
    for mask in ([prefer] if prefer is not None else []) + [allowed]:
        for node in range(len(room_free[0])):
            if mask is not None and not mask[node]:
                continue
            if all(room_free[d][node] >= shape[d] for d in range(len(shape))):
                for d in range(len(shape)):
                    room_free[d][node] -= shape[d]
                return node
    return -1


@settings(max_examples=300, deadline=None)
@given(rooms, st.sampled_from([0, 500, 1000, 3000]), st.sampled_from([0, 1]),
       st.lists(st.integers(0, 12), max_size=5), st.integers(0, 3))
def test_first_fit_over_a_masks_nodes_is_a_scan_of_every_node(spec, cpu, gpu, counts, masks):
    room, allowed_flags, prefer_flags = make_room(spec)
    allowed = Eligible(0, NO_CONSTRAINTS, allowed_flags) if masks & 1 else None
    prefer = Eligible(1, NO_CONSTRAINTS, prefer_flags) if masks & 2 else None
    shape = (cpu, 2000, gpu, 1)
    free = [column[:] for column in room.free]
    for count in counts:
        expected = []
        for _ in range(count):
            node = naive_take(free, allowed_flags if allowed else None,
                              prefer_flags if prefer else None, shape)
            if node < 0:
                break
            expected.append(node)
        assert room.take_many(shape, count, allowed, prefer) == expected
        assert room.free == free
        reachable = room.first_reachable(shape, allowed)
        fits = [n for n in range(room.count) if (allowed is None or allowed_flags[n])
                and all(free[d][n] >= shape[d] for d in range(4))]
        assert reachable == (fits[0] if fits else -1)


node_specs = st.lists(st.tuples(st.sampled_from(POOLS), st.booleans(), st.booleans()),
                      min_size=1, max_size=10)
constraint_specs = st.lists(
    st.tuples(st.booleans(), st.sampled_from([None, *POOLS]),
              st.sampled_from([None, "In", "NotIn", "Exists", "DoesNotExist", "host"])),
    min_size=1, max_size=6)


def facts_of(specs) -> dict[str, NodeFacts]:
    out = {}
    for i, (pool, tainted, spot) in enumerate(specs):
        name = f"n{i}"
        labels = [("kubernetes.io/hostname", name), ("pool", pool)] + (
            [("spot", "yes")] if spot else [])
        out[name] = NodeFacts(name, tuple(sorted(labels)), (TAINT,) if tainted else ())
    return out


def constraints_from(spec) -> PodConstraints:
    tolerant, pool, rule = spec
    required = None
    if rule == "host":
        required = (Term((Requirement("kubernetes.io/hostname", "In", ("n0", "n2")),)),)
    elif rule in ("In", "NotIn"):
        required = (Term((Requirement("pool", rule, ("a", "b")),)),)
    elif rule is not None:
        required = (Term((Requirement("spot", rule),)),)
    return PodConstraints(TOLERATE if tolerant else (), (("pool", pool),) if pool else (),
                          required)


def room_of(facts: dict[str, NodeFacts]) -> Room:
    ledger = ResourceLedger()
    for name, node_facts in facts.items():
        ledger.set_node(name, NodeCapacity(8000, 32000, 0), facts=node_facts)
    return Room(ledger.snapshot().nodes)


@settings(max_examples=200, deadline=None)
@given(node_specs, constraint_specs, st.integers(0, 9), st.sampled_from(["taint", "pool"]))
def test_eligibility_kept_across_plans_is_every_nodes_verdict(nodes, constraints, changed,
                                                              what):
    """Plan after plan on the same nodes, then after one node's taints or labels change:
    each mask is what the filters say of every node now."""
    facts = facts_of(nodes)
    sets = [constraints_from(spec) for spec in constraints]
    edited = dict(facts)
    victim = f"n{changed % len(nodes)}"
    old = facts[victim]
    if what == "taint":
        edited[victim] = NodeFacts(victim, old.labels, () if old.taints else (TAINT,))
    else:
        labels = tuple(sorted((k, "c" if v == "a" else "a") if k == "pool" else (k, v)
                              for k, v in old.labels))
        edited[victim] = NodeFacts(victim, labels, old.taints)
    for current in (facts, facts, edited, edited, facts):
        room = room_of(current)
        for constraints in sets:
            mask = room.eligible(constraints)
            flags = mask.flags if mask is not None else [True] * room.count
            assert flags == [not constraints.blocker(current[name]) for name in room.names]


def cluster(nodes, jobs) -> tuple[list[JobView], ClusterResource]:
    ledger = ResourceLedger()
    names = []
    for i, (cores, pool, tainted) in enumerate(nodes):
        name = f"n{i}"
        names.append(name)
        ledger.set_node(name, NodeCapacity(cores * 1000, cores * 4000, 2),
                        facts=NodeFacts(name, (("pool", pool),), (TAINT,) if tainted else ()))
    views = []
    for j, (shape, pool, tolerant, placed) in enumerate(jobs):
        cpu, memory, gpu = SHAPES[shape]
        constraints = PodConstraints(TOLERATE if tolerant else (),
                                     (("pool", pool),) if pool else ())
        trainers = []
        for k, n in enumerate(placed):
            node = names[n % len(names)]
            ledger.set_pod_resources("ns", f"j{j}-{k}", PodResources(cpu, cpu, memory, memory,
                                                                     gpu, gpu),
                                     node=node, trainer=True)
            trainers.append(Trainer(f"j{j}-{k}", node))
        views.append(JobView(
            "ns", f"j{j}", 1, 12, len(placed), cpu_request_milli=cpu, cpu_limit_milli=cpu,
            memory_request_mega=memory, memory_limit_mega=memory, gpu_request=gpu,
            gpu_limit=gpu, total=len(placed), running=len(placed), pending=0, unscheduled=0,
            trainers=tuple(trainers), constraints=constraints))
    return views, ledger.snapshot()


def pools_per_kind(plans, room):
    """`shares._pools` as it read before it grouped kinds by shape: per kind of trainer."""
    usable = usable_room(plans, room, _trainer_nodes(plans))
    masks = {p.kind: p.allowed for p in plans}
    kinds = sorted(masks)
    of_plan = np.array([kinds.index(p.kind) for p in plans], dtype=np.int64)
    slots = np.zeros((len(kinds), room.count), dtype=np.int64)
    for k, kind in enumerate(kinds):
        per_node = _per_node(usable, kind[0])
        allowed = masks[kind]
        slots[k] = per_node if allowed is None else np.where(allowed.array, per_node, 0)
    eligible = slots > 0
    some = np.array([any(kind[0]) for kind in kinds], dtype=bool)
    asks = np.array([kind[0][:3] for kind in kinds], dtype=np.int64).reshape(len(kinds), 3)
    merged: dict[tuple[bool, ...], tuple[int, ...]] = {}
    seen = set()
    for k in range(len(kinds)):
        nodes = eligible[k]
        key = np.packbits(nodes).tobytes()
        if key in seen or not some[k]:
            continue
        seen.add(key)
        inside = some & ~(eligible & ~nodes).any(axis=1)
        held = np.zeros((3, int(nodes.sum())), dtype=np.int64)
        for member in np.flatnonzero(inside).tolist():
            np.maximum(held, np.outer(asks[member], slots[member, nodes]), out=held)
        budget = tuple(int(b) for b in held.sum(axis=1))
        members = tuple(inside[of_plan].tolist())
        old = merged.get(members)
        merged[members] = budget if old is None else tuple(map(min, old, budget))
    return [(list(m), b) for m, b in merged.items()]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([4, 8, 16]), st.sampled_from(POOLS), st.booleans()),
             min_size=1, max_size=8),
    st.lists(st.tuples(st.integers(0, len(SHAPES) - 1), st.sampled_from([None, *POOLS]),
                       st.booleans(), st.lists(st.integers(0, 7), max_size=4)),
             min_size=1, max_size=8),
)
def test_pool_budgets_per_shape_are_those_per_kind(nodes, jobs):
    views, resources = cluster(nodes, jobs)
    room = Room(resources.nodes, extra_dimensions(resources.nodes, []))
    _, plans = build_plans(views, resources, 0.97, room)
    assert _pools(plans, room) == pools_per_kind(plans, room)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.integers(1, 8), st.data())
def test_one_unit_each_over_nonzero_rows_is_the_whole_column_check(rows, jobs, data):
    """The water-filling's last step of a round, over each unit's nonzero rows, against
    the check of the whole column (negative costs and budgets included)."""
    weights = np.array(data.draw(st.lists(st.lists(st.integers(-2, 5), min_size=jobs,
                                                   max_size=jobs),
                                          min_size=rows, max_size=rows)),
                       dtype=np.int64).reshape(rows, jobs)
    left = np.array(data.draw(st.lists(st.integers(-3, 12), min_size=rows, max_size=rows)),
                    dtype=np.int64)
    order = data.draw(st.permutations(range(jobs)))
    shares, active = np.zeros(jobs, dtype=np.int64), np.ones(jobs, dtype=bool)
    expected_left, expected_shares = left.copy(), shares.copy()
    expected_active = active.copy()
    for i in order:
        unit = weights[:, i]
        if bool(np.all((unit == 0) | (unit <= expected_left))):
            expected_shares[i] += 1
            expected_left -= unit
        else:
            expected_active[i] = False
    _one_unit_each(list(order), weights, left, shares, active)
    assert left.tolist() == expected_left.tolist()
    assert shares.tolist() == expected_shares.tolist()
    assert active.tolist() == expected_active.tolist()
