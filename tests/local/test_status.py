"""The status channel (status.json), its rendering, `edl status`, and the local node."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from edl.cli.status import status
from edl.local.display import render, summary_line
from edl.local.node import local_node, machine_memory_bytes
from edl.local.status import (
    PodLine,
    RunSnapshot,
    effective_state,
    find_runs,
    new_run_dir,
    read_snapshot,
    write_snapshot,
)


def snapshot(**overrides: object) -> RunSnapshot:
    values: dict = dict(
        job="digits", state="Running", pass_index=1, passes=3, tasks_done=7, tasks_total=20,
        trainers_running=2, trainers_desired=3, trainers_min=1, trainers_max=4,
        loss=0.1234, samples_per_s=950.0,
        pods=[PodLine("digits-master-a", "master", "Running", pid=os.getpid()),
              PodLine("digits-trainer-b", "trainer", "Failed", exit_code=1, message="boom")],
    )
    values.update(overrides)
    return RunSnapshot(**values)


def test_snapshot_survives_the_file(tmp_path: Path) -> None:
    original = snapshot()
    write_snapshot(tmp_path, original)
    assert read_snapshot(tmp_path) == original


def test_reader_ignores_unknown_keys(tmp_path: Path) -> None:
    (tmp_path / "status.json").write_text('{"job": "x", "future_field": 1, "pods": []}')
    assert read_snapshot(tmp_path).job == "x"


@pytest.mark.parametrize("text", ["[1, 2]", '{"job": "x", "pods": [3]}', "", '{"job": '])
def test_unreadable_or_misshapen_status_is_a_value_error(tmp_path: Path, text: str) -> None:
    """`edl status` turns ValueError into one line; nothing else may escape."""
    (tmp_path / "status.json").write_text(text)
    with pytest.raises(ValueError, match="cannot read run status"):
        read_snapshot(tmp_path)


def test_runs_started_together_get_distinct_dirs(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _: new_run_dir(tmp_path, "digits", now=1_700_000_000),
                             range(16)))
    assert len(set(made)) == 16 and all(path.is_dir() for path in made)


def test_runs_are_found_newest_first_and_by_job(tmp_path: Path) -> None:
    a = new_run_dir(tmp_path, "digits", now=1_700_000_000)
    b = new_run_dir(tmp_path, "digits", now=1_700_000_000)  # same second: made unique
    c = new_run_dir(tmp_path, "digits-big", now=1_700_000_100)
    assert a != b
    for i, path in enumerate((a, b, c)):
        write_snapshot(path, snapshot(job=path.name))
        os.utime(path / "status.json", (1000 + i, 1000 + i))
    assert find_runs(tmp_path) == [c, b, a]
    assert find_runs(tmp_path, "digits") == [b, a], "digits-big is another job"
    assert find_runs(tmp_path, "nope") == []


def test_active_run_whose_writer_died_is_stale() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert effective_state(snapshot(pid=dead.pid)) == "Stale"
    assert effective_state(snapshot(pid=os.getpid())) == "Running"
    assert effective_state(snapshot(pid=dead.pid, state="Succeeded")) == "Succeeded"


def test_live_pid_with_another_start_time_is_a_reused_pid_so_stale(tmp_path: Path) -> None:
    """pids are reused (pid_max 32768): pid + start time name the writer, the pid alone does not."""
    from edl.local.status import process_start_ticks

    mine = process_start_ticks(os.getpid())
    assert isinstance(mine, int) and mine > 0
    assert effective_state(snapshot(pid=os.getpid(), pid_start=mine)) == "Running"
    assert effective_state(snapshot(pid=os.getpid(), pid_start=mine + 1)) == "Stale"
    write_snapshot(tmp_path, snapshot(pid=os.getpid(), pid_start=mine + 1))
    assert effective_state(read_snapshot(tmp_path)) == "Stale"
    # a status file from before the field existed: the pid alone decides
    (tmp_path / "status.json").write_text(
        f'{{"job": "x", "state": "Running", "pid": {os.getpid()}, "pods": []}}'
    )
    old = read_snapshot(tmp_path)
    assert old.pid_start is None and effective_state(old) == "Running"


def test_a_new_snapshot_records_its_writers_start_time() -> None:
    from edl.local.status import process_start_ticks

    assert RunSnapshot(job="x").pid_start == process_start_ticks(os.getpid())


def test_render_shows_every_figure() -> None:
    console = Console(width=120, record=True)
    console.print(render(snapshot()))
    text = console.export_text()
    for expected in ("pass", "2 / 3", "7 / 20", "2 running / 3 desired", "0.1234", "950",
                     "digits-master-a", "exit 1"):
        assert expected in text
    line = summary_line(snapshot())
    assert "pass 2/3" in line and "tasks 7/20" in line and "trainers 2/3" in line


def test_edl_status_reads_the_newest_run(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path, "digits")
    write_snapshot(run, snapshot(pid=os.getpid()))
    result = CliRunner().invoke(status, ["digits", "--runs-dir", str(tmp_path), "--plain"])
    assert result.exit_code == 0, result.output
    assert "digits: Running, pass 2/3, tasks 7/20" in result.output


def test_edl_status_failed_run_exits_nonzero_with_reason(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path, "digits")
    write_snapshot(run, snapshot(state="Failed", message="trainer failed: ZeroDivisionError"))
    result = CliRunner().invoke(status, ["--runs-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "ZeroDivisionError" in result.output


def test_edl_status_without_runs_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(status, ["--runs-dir", str(tmp_path)])
    assert result.exit_code == 1
    expected = f"edl status: no run of any job under {tmp_path}/"
    assert result.output.strip().splitlines() == [expected]


def test_edl_status_of_an_unreadable_status_file_is_one_line(tmp_path: Path) -> None:
    (new_run_dir(tmp_path, "digits") / "status.json").write_text("[]")
    result = CliRunner().invoke(status, ["--runs-dir", str(tmp_path)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edl status: ") and "status.json" in lines[0]


def test_local_node_is_this_machine_or_as_configured() -> None:
    node = local_node()
    alloc = node["status"]["allocatable"]
    assert alloc["cpu"] == f"{len(os.sched_getaffinity(0)) * 1000}m"
    assert int(alloc["memory"]) == machine_memory_bytes() > 0
    virtual = local_node(cpu="8", memory="16Gi")["status"]["allocatable"]
    assert virtual["cpu"] == "8" and virtual["memory"] == "16Gi"


def test_edl_status_watch_follows_until_the_run_ends(tmp_path: Path) -> None:
    import threading

    run = new_run_dir(tmp_path, "digits")
    write_snapshot(run, snapshot(pid=os.getpid()))
    finish = threading.Timer(
        1.5, lambda: write_snapshot(run, snapshot(state="Succeeded", tasks_done=20, pass_index=2))
    )
    finish.start()
    try:
        result = CliRunner().invoke(status, ["--runs-dir", str(tmp_path), "--watch", "--plain"])
    finally:
        finish.cancel()
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("digits: Running, pass 2/3, tasks 7/20")
    assert lines[-1].startswith("digits: Succeeded, pass 3/3, tasks 20/20")


def test_edl_status_of_a_run_whose_edl_run_died_is_stale(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_snapshot(new_run_dir(tmp_path, "digits"), snapshot(pid=dead.pid))
    result = CliRunner().invoke(status, ["--runs-dir", str(tmp_path), "--watch", "--plain"])
    assert result.exit_code == 1
    assert result.output.startswith("digits: Stale")


def test_edl_status_piped_prints_plain_lines_not_the_panel(tmp_path: Path) -> None:
    """Issue 24: `edl status | cat` printed the rich panel's box drawing."""
    import subprocess
    import sys

    run = new_run_dir(tmp_path, "digits")
    write_snapshot(run, snapshot(pid=os.getpid(), events=[[3.0, "trainer t-1 was killed"]],
                                 events_total=1))
    done = subprocess.run(
        [sys.executable, "-m", "edl.cli.main", "status", "--runs-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # stdout is a pipe, as in `edl status | cat`
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("digits: Running, pass 2/3, tasks 7/20"), done.stdout
    assert "  [0:03] trainer t-1 was killed" in lines
    assert not set("╭╮╰╯│─") & set(done.stdout), done.stdout


def test_the_newest_run_is_the_latest_started_and_another_active_one_is_said(
    tmp_path: Path,
) -> None:
    """Issue 33: two runs of one name at once both write status.json every second, and
    `edl status`/`edl logs` showed whichever wrote last — often the one started first."""
    old = new_run_dir(tmp_path, "digits", now=1_700_000_000)
    new = new_run_dir(tmp_path, "digits", now=1_700_000_060)
    write_snapshot(new, snapshot(job="digits", state="Running"))
    write_snapshot(old, snapshot(job="digits", state="Running"))  # written last
    assert find_runs(tmp_path, "digits") == [new, old]
    shown = CliRunner().invoke(status, ["digits", "--runs-dir", str(tmp_path), "--plain"])
    assert shown.exit_code == 0, shown.output
    assert (f"edl status: another run of this name is active too: {old} (showing the "
            f"newest, {new.name}; name a run directory to choose)") in shown.output
