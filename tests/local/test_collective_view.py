"""Folding the agents' rendezvous records and the script's metrics into the run snapshot."""

from __future__ import annotations

from edl.local.collective import CollectiveView, apply_collective, fold
from edl.local.display import render, summary_line
from edl.local.status import RunSnapshot


def record(round_: int, world: int, rank: int = 0) -> dict[str, object]:
    return {"round": round_, "rank": rank, "nodes": world, "world_size": world}


def test_rounds_become_world_sizes_restarts_and_a_history() -> None:
    s = RunSnapshot(job="ddp", mode="collective")
    view = fold(CollectiveView(), {"a": record(0, 2), "b": record(0, 2, 1)}, None)
    s = apply_collective(s, view, 10.0)
    assert (s.world_size, s.restarts, s.world_history) == (2, 0, [[10.0, 2, 0]])
    # a pod left: the survivor's next round has one node; the gone pod's record stays
    view = fold(view, {"a": record(1, 1), "b": record(0, 2, 1)}, {"epoch": 3, "loss": 0.5})
    s = apply_collective(s, view, 30.0)
    assert (s.world_size, s.restarts, s.epoch, s.loss) == (1, 1, 3, 0.5)
    # the same round read again changes nothing; garbage is ignored
    view = fold(view, {"a": record(1, 1), "x": "not json", "y": {"round": "2"}}, {"accuracy": 0.9})
    s = apply_collective(s, view, 31.0)
    assert s.world_history == [[10.0, 2, 0], [30.0, 1, 1]] and s.accuracy == 0.9
    # two rounds between reads: both count as restarts
    view = fold(view, {"a": record(3, 2), "c": record(2, 2)}, None)
    s = apply_collective(s, view, 50.0)
    assert (s.world_size, s.restarts) == (2, 3)


def test_display_shows_world_size_restarts_and_sizes_over_time() -> None:
    s = RunSnapshot(job="ddp", mode="collective", world_size=2, restarts=1, epoch=4,
                    world_history=[[5.0, 2, 0], [65.0, 1, 1], [90.0, 2, 2]], accuracy=0.96)
    line = summary_line(s, "Running")
    assert "world 2, restarts 1, epoch 4" in line and "accuracy 0.960" in line
    assert "tasks" not in line and "pass" not in line
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(render(s))
    text = console.export_text()
    assert "2 at 0:05 → 1 at 1:05 → 2 at 1:30" in text
    assert "samples/s" not in text and "tasks" not in text
