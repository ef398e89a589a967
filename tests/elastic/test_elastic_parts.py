"""`edl.elastic`'s pure parts (the sampler, the state codec, the membership plans, the
audit) as properties, and its membership protocol on a real `TCPStore`."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed import TCPStore

from edl.elastic import codec
from edl.elastic.audit import Formed, Trained, coverage
from edl.elastic.membership import (
    Arrival,
    Membership,
    Plan,
    admissible,
    next_plan,
    order_arrivals,
)
from edl.elastic.sampler import epoch_order, shares, step_size
from edl.elastic.state import State
from edl.runtime.collective.launch import AgentConfig
from edl.runtime.collective.live import worker_command, worker_env


# -- the sampler ----------------------------------------------------------------------
@given(st.integers(1, 400), st.integers(1, 16),
       st.lists(st.integers(1, 8), min_size=1, max_size=40))
def test_any_sequence_of_worlds_covers_the_epoch_exactly_once(size, batch, worlds) -> None:
    """The world may change before any step: the parts still tile the epoch, each step's
    parts differ by at most one sample, and nobody idles unless fewer samples than
    workers are left."""
    consumed, covered, index = 0, [], 0
    while consumed < size:
        world = worlds[index % len(worlds)]
        index += 1
        parts = shares(consumed, size, world, batch)
        assert len(parts) == world and [p.rank for p in parts] == list(range(world))
        lengths = [len(p) for p in parts]
        assert max(lengths) - min(lengths) <= 1
        if size - consumed >= world:
            assert min(lengths) >= 1
        for part in parts:
            covered.extend(range(part.start, part.stop))
        consumed += sum(lengths)
        assert sum(lengths) == step_size(size - (consumed - sum(lengths)), world, batch) > 0
    assert covered == list(range(size))


@given(st.integers(0, 300), st.integers(0, 50), st.integers(0, 5))
def test_every_process_computes_the_same_epoch_order(size, epoch, seed) -> None:
    order = epoch_order(size, epoch, seed)
    assert sorted(order) == list(range(size)) and order == epoch_order(size, epoch, seed)


# -- the codec ------------------------------------------------------------------------
def test_a_model_and_adam_state_travel_without_pickle() -> None:
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()
    state = State(model, optimizer, note="x", best=0.5)
    state.progress.step = 7
    skeleton, tensors = codec.encode(state.tree())
    assert "pickle" not in skeleton
    specs = codec.tensor_specs(skeleton)
    flats = codec.flat_groups(tensors)
    tree = codec.decode(skeleton, codec.unflatten(specs, flats))
    fresh_model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(),
                                      torch.nn.Linear(3, 2))
    fresh = State(fresh_model, torch.optim.Adam(fresh_model.parameters(), lr=0.01))
    fresh.load(tree)
    for a, b in zip(model.parameters(), fresh_model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert fresh.optimizer is not None
    ours, theirs = optimizer.state_dict(), fresh.optimizer.state_dict()
    assert ours["state"].keys() == theirs["state"].keys()  # int keys kept
    for key, values in ours["state"].items():
        for name, value in values.items():
            assert torch.equal(value, theirs["state"][key][name])
    assert fresh.extra == {"note": "x", "best": 0.5} and fresh.progress.step == 7


def test_the_codec_names_what_it_cannot_carry() -> None:
    with pytest.raises(codec.CodecError, match=r"\.bad"):
        codec.encode({"bad": object()})


# -- plans ----------------------------------------------------------------------------
@given(st.lists(st.text("abc", min_size=1, max_size=3), unique=True, max_size=6),
       st.data())
def test_next_plan_keeps_the_stayers_in_order_then_the_joiners(members, data) -> None:
    current = Plan(3, tuple(members), 5)
    leaving = data.draw(st.lists(st.sampled_from(members), unique=True) if members
                        else st.just([]))
    joiners = [(5 + i, f"j{i}") for i in range(data.draw(st.integers(0, 3)))]
    plan = next_plan(current, leaving, joiners, 5 + len(joiners))
    assert plan.gen == 4
    assert plan.members == tuple(m for m in members if m not in leaving) + tuple(
        j for _, j in joiners)
    assert plan.admitted == tuple(s for s, _ in joiners) and plan.joiners_upto >= 5


@given(st.integers(0, 8), st.integers(0, 8),
       st.one_of(st.none(), st.sets(st.integers(1, 16), max_size=5)))
def test_joiners_are_admitted_only_to_an_allowed_world_size(stay, pending, allowed) -> None:
    sizes = sorted(allowed) if allowed is not None else None
    count = admissible(stay, pending, sizes)
    assert 0 <= count <= pending
    if not sizes:
        assert count == pending
    elif count:
        assert stay + count in sizes
        assert not any(stay + more in sizes for more in range(count + 1, pending + 1))
    else:
        assert not any(stay + more in sizes for more in range(1, pending + 1))


def test_the_most_advanced_worker_is_rank_zero() -> None:
    plan = Plan(2, ("a", "b", "c"), 0)
    verdict = order_arrivals(plan, [Arrival("c", 10), Arrival("a", 9), Arrival("b", 10)])
    assert [a.ident for a in verdict] == ["b", "c", "a"]


# -- the audit ------------------------------------------------------------------------
def test_the_audit_sees_a_skipped_a_doubled_and_a_redone_step() -> None:
    size = 8
    whole = [Trained(0, 0, 0, 0, 2, 0, 2), Trained(0, 0, 0, 1, 2, 2, 4),
             Trained(0, 1, 0, 0, 2, 4, 6), Trained(0, 1, 0, 1, 2, 6, 8)]
    assert coverage(whole, [Formed(0, 0, 2, 0.0)], size, 1).exact
    skipped = coverage(whole[:3], [Formed(0, 0, 2, 0.0)], size, 1)
    assert skipped.missing == {0: [6, 7]}
    doubled = coverage([*whole, Trained(1, 2, 0, 0, 1, 6, 8)], [Formed(0, 0, 2, 0.0)], size, 1)
    assert doubled.doubled == {0: [6, 7]}
    # generation 1 starts again at step 1: gen 0's steps 1 and 2 are undone; step 1 was
    # finished (gen 0 went on to step 2), so it is redone; step 2 was in flight
    rolled = [*whole, Trained(0, 2, 1, 0, 2, 0, 4), Trained(1, 1, 0, 0, 1, 4, 8),
              Trained(1, 2, 1, 0, 1, 0, 8)]
    seen = coverage(rolled, [Formed(0, 0, 2, 0.0), Formed(1, 1, 1, 1.0)], size, 2)
    assert seen.exact and seen.redone_steps == 1


# -- the membership protocol on a real store --------------------------------------------
@pytest.fixture
def store() -> TCPStore:
    return TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                    timeout=timedelta(seconds=10))


def client(store: TCPStore) -> TCPStore:
    return TCPStore("127.0.0.1", store.port, is_master=False, timeout=timedelta(seconds=10))


def test_every_proposer_gets_the_first_plan_and_joiners_are_admitted(store) -> None:
    a, b = Membership(client(store), "job", "a"), Membership(client(store), "job", "b")
    slots = [a.register(), b.register()]
    assert slots == [0, 1] and a.joiners_seen() == 2
    assert a.joiner_idents(0, 2) == [(0, "a"), (1, "b")]
    first = a.propose(Plan(0, ("a", "b"), 2, (0, 1)))
    second = b.propose(Plan(0, ("b",), 2, (1,)))
    assert second == first and a.admitted(0) == 0 and b.admitted(1) == 0
    assert a.latest() == 0


def test_the_verdict_leaves_out_a_worker_that_did_not_arrive(store) -> None:
    plan = Plan(1, ("a", "b", "c"), 0)
    verdicts: dict[str, list[Arrival]] = {}

    def arrive(ident: str, step: int) -> None:
        verdicts[ident] = Membership(client(store), "job", ident).arrive(plan, step, 1.0)

    threads = [threading.Thread(target=arrive, args=(i, s)) for i, s in (("a", 4), ("b", 5))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert verdicts["a"] == verdicts["b"] == [Arrival("b", 5), Arrival("a", 4)]


def test_a_worker_reported_gone_is_not_waited_for(store) -> None:
    plan = Plan(1, ("a", "b"), 0)
    Membership(client(store), "job", "agent").mark_gone("b")
    verdict = Membership(client(store), "job", "a").arrive(plan, 3, 30.0)  # returns at once
    assert verdict == [Arrival("a", 3)]


@settings(deadline=None, max_examples=20)
@given(st.integers(1, 3), st.integers(1, 4))
def test_the_live_agent_gives_each_worker_its_contract(nodes, nproc) -> None:
    config = AgentConfig("j", "ns", "python train.py --x", nodes, nodes + 1, nproc)
    env = worker_env({"EDL_POD_NAME": "p"}, config, "h:1", 1, 2)
    assert env["EDL_LIVE_STORE"] == "h:1" and env["EDL_LIVE_IDENT"] == "p/1/2"
    assert env["EDL_LIVE_MIN_WORLD"] == str(nodes * nproc)
    assert env["EDL_LIVE_MAX_WORLD"] == str((nodes + 1) * nproc)
    assert env["LOCAL_WORLD_SIZE"] == str(nproc)  # AdaptiveBatch counts trainers by it
    assert worker_command(config, "/py") == ["/py", "-u", "train.py", "--x"]
