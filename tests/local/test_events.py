"""The fault lines and state line of `edl run` (pure rules), and the display printing them."""

from __future__ import annotations

from edl.accounting import PodResources
from edl.coord.backoff import Backoff
from edl.local.display import LiveDisplay, summary_line
from edl.local.events import (
    EventLog,
    exit_event,
    exit_message,
    exit_phase,
    failover_event,
    pserver_start_event,
)
from edl.local.fit import shortfall
from edl.local.snapshot import run_state
from edl.local.status import RunSnapshot


def test_exit_phases_do_not_call_a_drain_or_a_never_run_pod_a_failure() -> None:
    assert exit_phase(143, terminating=True, ran=True) == "Stopped"  # drained trainer
    assert exit_phase(0, terminating=False, ran=False) == "Deleted"  # deleted while Pending
    assert exit_phase(0, terminating=False, ran=True) == "Succeeded"
    assert exit_phase(137, terminating=False, ran=True) == "Failed"


def test_exit_lines() -> None:
    assert exit_event("p", "pserver", 137, False, True, "x") == "pserver p was killed by SIGKILL"
    assert exit_event("t", "trainer", 1, False, True, "ZeroDivisionError") == (
        "trainer t exited with status 1: ZeroDivisionError"
    )
    assert exit_event("t", "trainer", 143, True, True, "") == ""  # a drain is no news
    assert exit_event("r", "reservation", 0, True, True, "") == ""
    assert exit_event("m", "master", 0, False, True, "") == ""


def test_pserver_start_lines() -> None:
    restored = "x pserver 1 restored version 42 from /c/1.ckpt\ny pserver 1 serving on h:1\n"
    assert pserver_start_event("p", restored) == (
        "pserver p restored shard 1 from checkpoint version 42"
    )
    assert "no checkpoint" in pserver_start_event("p", "pserver 0 serving on h:2")
    assert "optimizer state is lost" in pserver_start_event("p", "pserver 0 serving on h:2")
    assert pserver_start_event("p", "starting") == ""


def test_failover_line_names_the_pass_it_resumed_at() -> None:
    before = {"leader": "127.0.0.1:1", "passes": 10}
    after = {"leader": "127.0.0.1:2", "passes": 10, "resumed_pass": 3, "resumed_done": 5,
             "tasks_total": 12}
    assert failover_event(before, after) == (
        "master failover: the master at 127.0.0.1:2 leads, resumed at pass 4/10 "
        "with 5/12 tasks of it done"
    )
    assert failover_event(before, before) == ""
    assert failover_event(None, after) == ""


def test_event_log_keeps_the_last_and_counts_all() -> None:
    log = EventLog(started=0.0)
    for i in range(30):
        assert log.add(f"e{i}")
    assert not log.add("")
    assert log.total == 30 and len(log.events) == 20 and log.events[-1][1] == "e29"


def test_state_line_agrees_with_the_counts() -> None:
    """Defect 8: 'Starting … trainers 0/3 … — 3 of 3 trainers running'."""
    assert run_state(False, 0, 3, "") == ("Starting", "waiting for trainers to start")
    assert run_state(True, 3, 3, "") == ("Running", "")
    state, message = run_state(True, 0, 3, "")  # trainers being replaced: still Running
    assert state == "Running" and message == "no trainer running (3 desired), replacements starting"
    state, message = run_state(False, 0, 1, "p-0: 0/1 nodes are available: 1 Insufficient cpu.")
    assert message == "waiting: p-0: 0/1 nodes are available: 1 Insufficient cpu."
    line = summary_line(RunSnapshot(job="j", state="Running", message=message))
    assert line.endswith("— " + message)


def test_trainers_that_finished_are_no_alarm() -> None:
    """Issue 24: '100% overall (ETA 0:00) — no trainer running (3 desired), replacements
    starting' at the end of a successful run: the trainers had exited 0."""
    assert run_state(True, 0, 3, "", finished=1) == ("Running", "trainers finished")
    assert run_state(True, 2, 3, "", finished=1) == ("Running", "")
    assert run_state(True, 0, 3, "", finished=0)[1].endswith("replacements starting")


def test_shortfall_names_what_the_job_lacks() -> None:
    one = PodResources(cpu_request_milli=100, memory_request_mega=134)
    footprint = {"master": (1, one), "pserver": (2, one), "trainer": (1, one)}
    assert shortfall(footprint, (400, 1000, 0)) == ""
    lacking = shortfall(footprint, (100, 1000, 0))
    assert lacking == ("the job needs at least cpu 400m (this machine has 100m) for 1 master, "
                       "2 pservers, 1 trainer")


def test_plain_display_prints_each_event_once(capsys) -> None:
    display = LiveDisplay(plain=True, line_every_s=0)
    snapshot = RunSnapshot(job="j", events=[[1.0, "a"]], events_total=1)
    display.update(snapshot)
    display.update(snapshot)
    snapshot.events.append([2.0, "b"])
    snapshot.events_total = 2
    display.update(snapshot)
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("j: [")] == ["j: [0:01] a", "j: [0:02] b"]


def test_backoff_doubles_to_its_cap_and_logs_ever_more_rarely() -> None:
    backoff = Backoff(first=0.2, cap=2.0)
    pauses, logged = zip(*(backoff.failed() for _ in range(100)), strict=True)
    assert pauses[:5] == (0.2, 0.4, 0.8, 1.6, 2.0) and max(pauses) == 2.0
    assert sum(logged) == 7  # failures 1, 2, 4, 8, 16, 32, 64 of 100
    backoff.succeeded()
    assert backoff.failed() == (0.2, True)


def test_overall_progress_and_eta() -> None:
    from edl.local.snapshot import eta_s, overall

    s = RunSnapshot(job="j", state="Running", passes=10, pass_index=4, tasks_total=12,
                    tasks_done=6, training_started_at=100.0, updated_at=154.0)
    assert overall(s) == (54, 120)
    assert eta_s(s) == 66.0  # 54 tasks in 54 s: 66 left
    line = summary_line(s)
    assert "45% overall (ETA 1:06)" in line
    assert eta_s(RunSnapshot(job="j", state="Running", passes=10)) is None


def test_panel_shows_reasons_never_ran_and_events() -> None:
    from rich.console import Console

    from edl.local.display import render
    from edl.local.status import PodLine

    s = RunSnapshot(
        job="d", state="Running",
        pods=[PodLine("d-pserver-1", "pserver", "Pending",
                      message="0/1 nodes are available: 1 Insufficient cpu."),
              PodLine("d-trainer-0", "trainer", "Stopped", exit_code=143),
              PodLine("d-trainer-5", "trainer", "Deleted", exit_code=0)],
        events=[[3.0, "pserver d-pserver-0 was killed by SIGKILL"]], events_total=1,
    )  # fmt: skip
    console = Console(width=120, record=True)
    console.print(render(s))
    text = console.export_text()
    assert "Pending  0/1 nodes are available: 1 Insufficient cpu." in text
    assert "Deleted  never ran" in text and "Succeeded" not in text
    assert "0:03  pserver d-pserver-0 was killed by SIGKILL" in text


def test_a_killed_pods_line_gives_the_signal_not_its_last_log_line() -> None:
    """Issue 33: a SIGKILLed master showed 'Failed exit 137 … INFO edl.master: trainers
    lost: [...]' in `edl status`, its last log line read as the reason."""
    last = "2026-12-01 10:00:00 master INFO edl.master: trainers lost: ['t-1']"
    assert exit_message(137, last) == "killed by SIGKILL"
    assert exit_message(143, last) == "killed by SIGTERM"
    assert exit_message(1, "ValueError: bad") == "ValueError: bad"
    assert exit_message(200, last) == last  # no such signal: the line is all there is
