"""Folding what the run observes into a snapshot, and the plain (non-terminal) display."""

from __future__ import annotations

from edl.local.display import LiveDisplay, summary_line
from edl.local.snapshot import apply_progress, apply_trainers, touch
from edl.local.status import RunSnapshot

PROGRESS = {
    "pass": 3, "passes": 15, "finished": False, "tasks_total": 12, "tasks_done": 5,
    "tasks_failed": 0, "redispatches": 2, "last_loss": 0.25, "samples_per_s": 1234.5,
    "metrics": {"accuracy": 0.9},
}


def test_progress_fills_the_figures() -> None:
    s = apply_progress(RunSnapshot(job="digits"), PROGRESS)
    assert (s.pass_index, s.passes, s.tasks_done, s.tasks_total) == (3, 15, 5, 12)
    assert (s.loss, s.samples_per_s, s.accuracy, s.redispatched) == (0.25, 1234.5, 0.9, 2)


def test_a_batch_adapting_job_s_batch_and_noise_scale_are_shown() -> None:
    adapting = {**PROGRESS, "batch": 96.0, "noise_scale": 140.0, "efficiency": 0.8}
    s = apply_progress(RunSnapshot(job="digits"), adapting)
    assert (s.batch, s.noise_scale, s.efficiency) == (96.0, 140.0, 0.8)
    assert "batch 96, noise scale 140, efficiency 0.80" in summary_line(s)
    assert apply_progress(RunSnapshot(job="digits"), PROGRESS).batch is None


def test_the_per_trainer_batches_tasks_finished_at_are_kept() -> None:
    """A PS job's master counts the tasks finished at each per-trainer batch it handed
    out (issue 32); a malformed record leaves the last good one."""
    s = apply_progress(RunSnapshot(job="digits"), {**PROGRESS, "trainer_batches": {"32": 4}})
    assert s.trainer_batches == {"32": 4}
    s = apply_progress(s, {**PROGRESS, "trainer_batches": {"32": 4, "171": 9}})
    assert s.trainer_batches == {"32": 4, "171": 9}
    for bad in ({"x": 1}, {"32": -1}, {"32": 1.5}, [1], "32"):
        assert apply_progress(s, {**PROGRESS, "trainer_batches": bad}).trainer_batches == {
            "32": 4, "171": 9}


def test_an_unresolved_noise_scale_is_shown_as_such_until_a_figure_arrives() -> None:
    unresolved = {**PROGRESS, "batch": 64.0, "noise_unresolved": True}
    s = apply_progress(RunSnapshot(job="digits"), unresolved)
    assert s.noise_unresolved and s.noise_scale is None
    assert "batch 64, noise scale unresolved" in summary_line(s)
    s = apply_progress(s, PROGRESS)  # a progress without the shards' figures changes nothing
    assert s.noise_unresolved
    s = apply_progress(s, {**PROGRESS, "noise_scale": 900.0, "efficiency": 0.9})
    assert not s.noise_unresolved and "noise scale 900, efficiency 0.90" in summary_line(s)


def test_finished_job_shows_its_last_pass_complete() -> None:
    done = {**PROGRESS, "pass": 15, "finished": True, "tasks_done": 0}
    s = apply_progress(RunSnapshot(job="digits"), done)
    assert s.pass_index == 14 and s.tasks_done == s.tasks_total == 12


def test_missing_or_garbled_progress_keeps_what_was_known() -> None:
    before = apply_progress(RunSnapshot(job="digits"), PROGRESS)
    assert apply_progress(before, None) == before
    after = apply_progress(before, {"tasks_done": "many", "last_loss": None})
    assert after.tasks_done == 5 and after.loss == 0.25


def test_trainer_counts() -> None:
    s = apply_trainers(RunSnapshot(job="d"), running=2, desired=3, minimum=1, maximum=3)
    assert (s.trainers_running, s.trainers_desired, s.trainers_min, s.trainers_max) == (2, 3, 1, 3)


def test_plain_display_prints_changes_and_the_final_line(capsys) -> None:  # type: ignore[no-untyped-def]
    display = LiveDisplay(plain=True, line_every_s=3600)
    s = apply_progress(RunSnapshot(job="digits", state="Running"), PROGRESS)
    with display:
        display.update(s)
        display.update(touch(s))  # same figures: nothing new to say
        display.update(touch(s, "Succeeded", "trainers finished"))
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("digits: Running, pass 4/15, tasks 5/12")
    assert lines[1].startswith("digits: Succeeded") and "trainers finished" in lines[1]


def test_measured_throughput_and_the_fit_at_plus_minus_one_are_shown() -> None:
    from edl.local.display import scaling_line
    from edl.local.snapshot import apply_fit
    from edl.throughput import Observation, UslCurve

    points = [Observation(1.0, 2, 190.0), Observation(2.0, 3, 270.0)]
    s = apply_fit(RunSnapshot(job="digits"), UslCurve(100.0, 0.05), points)
    assert (s.measured_trainers, s.measured_samples_per_s) == (3, 270.0)
    assert s.fitted_samples_per_s == [190.48, 272.73, 347.83]
    line = scaling_line(s)
    assert "measured 270.0 samples/s with 3 trainers" in line
    assert "2 -> 190.5, 3 -> 272.7, 4 -> 347.8" in line
    assert apply_fit(s, None, []) is s  # nothing measured yet: unchanged
