"""Folding the agents' rendezvous records and the script's metrics into the run snapshot."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from edl.local.collective import (
    CollectiveMonitor,
    CollectiveReader,
    CollectiveView,
    CrashStreak,
    WorkerFailure,
    apply_collective,
    fold,
    new_failures,
)
from edl.local.display import render, summary_line
from edl.local.snapshot import eta_s, overall
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


def failure(count: int, error: str = "ValueError: bad lr", left: int = 97) -> dict[str, object]:
    return {"error": error, "restarts_left": left, "max_restarts": 100, "failures": count}


def test_each_worker_failure_is_one_line_with_the_scripts_error_and_the_restarts_left() -> None:
    key = "/edl/default/ddp/collective/failures/"
    first = fold(CollectiveView(), {}, None, {key + "ddp-trainer-00000": failure(1, left=99)})
    lines = [f.event() for f in new_failures(CollectiveView(), first)]
    assert lines == ["trainer ddp-trainer-00000: the script failed: ValueError: bad lr; torch "
                     "restarts them (99 of 100 restarts left, spec.collective.max-restarts)"]
    again = fold(first, {}, None, {key + "ddp-trainer-00000": failure(1, left=99)})
    assert new_failures(first, again) == []  # the same record read again is no news
    killed = fold(again, {}, None, {key + "ddp-trainer-00000": failure(3, error="")})
    (news,) = new_failures(again, killed)
    assert news.times == 2 and news.event().startswith("trainer ddp-trainer-00000: its workers")
    garbage = fold(killed, {}, None, {key + "x": "nope", key + "y": {"failures": "2"}})
    assert new_failures(killed, garbage) == []


def test_the_same_error_in_a_row_with_no_epoch_between_is_a_crash_loop() -> None:
    streak = CrashStreak()
    bad = WorkerFailure("p", "ValueError: bad lr", 99, 100)
    assert streak.add(bad, None) == 1 and streak.add(bad, None) == 2
    assert streak.add(WorkerFailure("p", "", None, None), None) == 2  # a kill: not counted
    assert streak.add(bad, 3) == 1  # an epoch finished in between: it made progress
    assert streak.add(WorkerFailure("q", "KeyError: 'x'", 98, 100), 3) == 1  # another error
    assert streak.add(WorkerFailure("q", "KeyError: 'x'", 96, 100, times=2), 3) == 3


def test_a_failed_runs_reason_puts_the_scripts_error_first() -> None:
    monitor = CollectiveMonitor(CollectiveReader("http://127.0.0.1:1", "default", "ddp"), 3)
    assert monitor.reason("the trainer Job failed") == "the trainer Job failed"
    monitor.script_error = "ValueError: bad lr"
    assert monitor.reason("the trainer Job failed: BackoffLimitExceeded") == (
        "the script failed: ValueError: bad lr; the trainer Job failed: BackoffLimitExceeded")
    said = "last failed trainer t (exit 1): edl agent: …: ValueError: bad lr"
    assert monitor.reason(said) == said


def test_epochs_count_from_the_scripts_figures_with_progress_and_an_eta() -> None:
    s = RunSnapshot(job="ddp", mode="collective", passes=1, state="Running")
    first = fold(CollectiveView(), {"a": record(0, 2)}, {"epoch": 1, "epochs": 20, "loss": 0.9})
    s = apply_collective(s, first, 10.0)
    assert s.training_started_at is not None and s.training_started_done == 1
    # issue 33: the first epoch's time includes every worker's start: no ETA from it
    assert eta_s(replace(s, updated_at=s.training_started_at + 60.0)) is None
    view = fold(first, {"a": record(0, 2)}, {"epoch": 5, "epochs": 20, "loss": 0.4})
    s = apply_collective(s, view, 50.0)
    assert (s.epoch, s.epochs) == (5, 20)
    s = replace(s, updated_at=s.training_started_at + 40.0)
    assert overall(s) == (5, 20)
    eta = eta_s(s)
    assert eta is not None and abs(eta - 150.0) < 1e-6  # 4 epochs in 40 s: 15 to go
    line = summary_line(s)
    assert "epoch 5/20" in line and "25% overall (ETA 2:30)" in line
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(render(s))
    assert "5 / 20 epochs  ETA 2:30" in console.export_text()
    # without a total, no progress is invented
    plain = apply_collective(RunSnapshot(job="ddp", mode="collective"),
                             fold(CollectiveView(), {}, {"epoch": 5}), 1.0)
    assert overall(plain) is None and "epoch 5," in summary_line(plain, "Running")


def test_display_shows_the_batch_noise_scale_and_efficiency_of_an_adapting_script() -> None:
    s = RunSnapshot(job="ddp", mode="collective", world_size=2, restarts=0, epoch=3,
                    batch=256.0, noise_scale=812.4, efficiency=0.83)
    line = summary_line(s, "Running")
    assert "epoch 3, batch 256, noise scale 812, efficiency 0.83" in line


def test_a_live_worker_failure_and_every_world_change_are_event_lines() -> None:
    """Issue 33: in a live job a killed worker left no event line (world 4 -> 3 -> 4 on
    screen, the events list empty; the reason only in the agent's log)."""
    from edl.runtime.collective.launch import config_from_env
    from edl.runtime.collective.live import _LiveFailures

    config = config_from_env({"EDL_TRAINERS": "1", "EDL_ENTRYPOINT": "python t.py"})
    failures = _LiveFailures({"EDL_POD_NAME": "live-trainer-a"}, config)
    killed = failures.payload("live-trainer-a/0", -9, 99, 100)
    for line in ("Traceback (most recent call last):\n", "  File \"t.py\"\n", "ValueError: x\n"):
        failures.errors.feed(line)
    raised = failures.payload("live-trainer-a/0", 1, 98, 100)
    view = fold(CollectiveView(), {}, None, {"f/live-trainer-a": killed})
    [first] = new_failures(CollectiveView(), view)
    assert first.event() == ("trainer live-trainer-a: a worker killed by SIGKILL; the agent "
                             "restarts it, it rejoins the live world (99 of 100 restarts "
                             "left, spec.collective.max-restarts)")
    later = fold(view, {}, None, {"f/live-trainer-a": raised})
    [second] = new_failures(view, later)
    assert second.event().startswith("trainer live-trainer-a: the script failed: ValueError: x;")

    async def world_changes() -> list[str]:
        class Reader:
            view = CollectiveView()

            async def read(self) -> CollectiveView:
                self.view = views.pop(0)
                return self.view

        views = [fold(CollectiveView(), {"a": record(0, 4)}, {"batch": 32}),
                 fold(CollectiveView(), {"a": record(1, 3)}, {"batch": 32}),
                 fold(CollectiveView(), {"a": record(2, 4)}, {"batch": 512})]
        monitor = CollectiveMonitor(Reader(), 3)  # type: ignore[arg-type]
        lines: list[str] = []
        s = RunSnapshot(job="live", mode="collective")
        for _ in range(3):
            s = await monitor.refresh(s, 1.0, lines.append)
        return lines

    assert asyncio.run(world_changes()) == [
        "world 4 -> 3 (round 1)", "world 3 -> 4 (round 2)",
        "batch 32 -> 512 (the workers run the new batch)"]  # on screen, not only in the log
