"""Issue 12 chaos: etcd killed mid-run, a job that cannot be scheduled, a SIGKILLed run's
etcd data dir, and the fault lines `edl run --plain` prints for pserver and master kills.

Real processes throughout: `edl run` as a subprocess, its real etcd and pods.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from edl.local.status import read_snapshot
from paced import paced_digits

from .conftest import descendants, digits_job, run_dir_of, start_edl_run, wait_for

pytestmark = pytest.mark.slow


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _etcd_pid(root: int) -> int | None:
    found = [p for p in descendants(root) if "--data-dir" in _cmdline(p)]
    return found[0] if found else None


def _pod_pid(run_dir: Path, prefix: str) -> int | None:
    snapshot = read_snapshot(run_dir)
    pods = [p for p in snapshot.pods if p.name.startswith(prefix) and p.pid]
    return pods[0].pid if pods else None


def _shard_of(run_dir: Path, pid: int) -> int:
    """The shard index the pserver pod with `pid` serves, from its log."""
    (pod,) = [p for p in read_snapshot(run_dir).pods if p.pid == pid]
    found = wait_for(lambda: re.search(r"pserver (\d+) serving on",
                                       (run_dir / f"{pod.name}.log").read_text()),
                     60, f"{pod.name} to serve")  # fmt: skip
    return int(found.group(1))


def _wait_checkpoint_of_record(run_dir: Path, index: int) -> None:
    """Until shard `index` has a checkpoint in etcd's record: a pserver deletes its
    previous file only after recording the next, so a file replaced by a newer one was
    recorded (a file merely present may be a write not yet recorded)."""

    def files() -> set[str]:
        return {p.name for p in (run_dir / "checkpoints").glob(f"**/pserver-{index}-*.ckpt")}

    first = wait_for(files, 60, f"a checkpoint of shard {index}")
    wait_for(lambda: (now := files()) and not now & first, 60, f"shard {index}'s next one")


def _finish(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_etcd_sigkilled_mid_run_is_restarted_and_the_run_succeeds(tmp_path: Path) -> None:
    """Defect 1: the run hung for ever with etcd <defunct>. Now: noticed at once, restarted
    on the same data dir, the members carry on, the run succeeds with the same data.

    Paced (0.02 s a step, 40 passes: at least ~12 s of training at 3 trainers): an
    unpaced run could finish on a fast machine before the test finds etcd to kill."""
    workspace = paced_digits(tmp_path / "paced", 0.02)
    proc = start_edl_run(tmp_path, digits_job(tmp_path, passes=40, workspace=workspace))
    try:
        run_dir = wait_for(lambda: run_dir_of(tmp_path), 60, "the run directory")
        wait_for(lambda: (read_snapshot(run_dir).tasks_done or 0) > 0, 180, "training")
        etcd = wait_for(lambda: _etcd_pid(proc.pid), 10, "the etcd process")
        killed_at = time.monotonic()
        os.kill(etcd, signal.SIGKILL)
        # reaped (no <defunct> left) and a new server in its place, within seconds
        wait_for(lambda: not Path(f"/proc/{etcd}").exists(), 10, "the dead etcd reaped")
        new = wait_for(lambda: _etcd_pid(proc.pid), 15, "a restarted etcd")
        assert new != etcd and time.monotonic() - killed_at < 15
        before = read_snapshot(run_dir)
        wait_for(lambda: (read_snapshot(run_dir).pass_index or 0) > (before.pass_index or 0)
                 or read_snapshot(run_dir).state != "Running", 120, "progress after the restart")
    except BaseException:
        _finish(proc, 5)
        raise
    out, err = _finish(proc, 400)
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    assert f"etcd (pid {etcd}) was killed by SIGKILL; restarting it on the same data dir" in out
    assert "etcd restarted" in out
    # retry logging backs off: a few lines, not one per 200 ms
    noisy = [line for log in run_dir.glob("*.log") for line in log.read_text().splitlines()
             if "retrying" in line or "re-listing" in line]
    assert len(noisy) < 60, noisy[:10]


@pytest.mark.parametrize("option, reason", [
    (["--cpu", "0.1"], "Insufficient cpu"),
    (["--memory", "1Ki"], "Insufficient memory"),
])  # fmt: skip
def test_a_job_that_can_never_fit_fails_at_once_with_the_schedulers_reason(
    tmp_path: Path, option: list[str], reason: str
) -> None:
    """Defect 3: this waited for ever ('waiting for trainers: 1 pending')."""
    started = time.monotonic()
    proc = start_edl_run(tmp_path, digits_job(tmp_path), *option)
    out, err = _finish(proc, 60)
    took = time.monotonic() - started
    assert proc.returncode == 1, f"stdout:\n{out}\nstderr:\n{err}"
    failed = [line for line in err.splitlines() if "Failed" in line]
    assert len(failed) == 1 and "cannot be scheduled: 0/1 nodes are available: 1 " in failed[0]
    assert reason in failed[0] and "the job needs at least" in failed[0], failed
    assert took < 20, f"took {took:.1f} s"  # 10 s of run plus the interpreter starts
    snapshot = read_snapshot(run_dir_of(tmp_path))  # type: ignore[arg-type]
    never_ran = [p for p in snapshot.pods if p.exit_code is not None and p.pid is None]
    assert all(p.phase in ("Deleted", "Stopped") for p in never_ran), snapshot.pods


def test_a_reservation_that_cannot_be_placed_is_reported(tmp_path: Path) -> None:
    proc = start_edl_run(tmp_path, digits_job(tmp_path, passes=2), "--cpu", "2",
                         "--reserve", "5@0")
    out, _err = _finish(proc, 300)
    assert "reservation reserved-0 is not placed: 0/1 nodes are available: 1 Insufficient cpu" \
        in out, out


def test_a_sigkilled_run_leaves_no_etcd_data_dir_after_the_next_run(tmp_path: Path) -> None:
    """Defect 4: each SIGKILLed run left a 128 MB /tmp/edl-etcd-* behind."""
    private_tmp = tmp_path / "tmp"
    proc = start_edl_run(tmp_path, digits_job(tmp_path, passes=10_000))
    try:
        wait_for(lambda: _etcd_pid(proc.pid), 60, "etcd")
        wait_for(lambda: list(private_tmp.glob("edl-etcd-*")), 10, "the data dir")
        proc.kill()
        proc.wait(timeout=30)
    finally:
        _finish(proc, 5)
    left = list(private_tmp.glob("edl-etcd-*"))
    assert left  # nothing could remove it: its owner died by SIGKILL
    # the next run (it fails fast: it does not fit) sweeps the dead owner's dir
    second = start_edl_run(tmp_path, digits_job(tmp_path), "--cpu", "0.1")
    _finish(second, 60)
    assert list(private_tmp.glob("edl-etcd-*")) == []


def test_pserver_and_master_kills_are_one_line_each_in_plain_output(tmp_path: Path) -> None:
    """The display's lines for a pserver kill (its replacement and how its shard came back)
    and a master kill (the failover and the pass it resumed at).

    Paced (0.02 s a step, 60 passes: at least ~18 s of training at 3 trainers), so the
    master is still there to kill after the pserver's recovery on a fast machine too."""
    workspace = paced_digits(tmp_path / "paced", 0.02)
    proc = start_edl_run(tmp_path, digits_job(tmp_path, passes=60, workspace=workspace),
                         "--checkpoint-interval", "1")  # fmt: skip
    try:
        run_dir = wait_for(lambda: run_dir_of(tmp_path), 60, "the run directory")
        wait_for(lambda: (read_snapshot(run_dir).tasks_done or 0) > 0, 180, "training")
        pserver = wait_for(lambda: _pod_pid(run_dir, "digits-pserver-"), 10, "a pserver pid")
        _wait_checkpoint_of_record(run_dir, _shard_of(run_dir, pserver))
        os.killpg(pserver, signal.SIGKILL)
        wait_for(lambda: any("restored shard" in e[1] or "no checkpoint" in e[1]
                             for e in read_snapshot(run_dir).events), 120, "the pserver back")
        master = wait_for(lambda: _pod_pid(run_dir, "digits-master-"), 10, "a master pid")
        os.killpg(master, signal.SIGKILL)
    except BaseException:
        _finish(proc, 5)
        raise
    out, err = _finish(proc, 400)
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    lines = out.splitlines()

    def one(pattern: str) -> str:
        found = [line for line in lines if re.search(pattern, line)]
        assert len(found) == 1, (pattern, lines)
        return found[0]

    one(r"\] pserver digits-pserver-\d+ was killed by SIGKILL$")
    one(r"\] pserver digits-pserver-\d+ replaces digits-pserver-\d+$")
    one(r"\] pserver digits-pserver-\d+ restored shard \d from checkpoint version \d+$")
    one(r"\] master digits-master-\d+ was killed by SIGKILL$")
    one(r"\] master digits-master-\d+ replaces digits-master-\d+$")
    one(r"\] master failover: the master at \S+ leads, resumed at pass \d+/60 with \d+/\d+")


def test_a_configuration_error_fails_the_run_in_seconds(tmp_path: Path) -> None:
    """A trainer whose EDL_WORKSPACE is not a directory failed the run only after 51 s of
    replacements; it exits with EX_CONFIG now and the run fails at once, saying why."""
    job = digits_job(tmp_path)
    data = yaml.safe_load(job.read_text())
    data["spec"]["trainer"]["workspace"] = "/nonexistent-workspace"
    job.write_text(yaml.safe_dump(data))
    started = time.monotonic()
    proc = start_edl_run(tmp_path, job)
    out, err = _finish(proc, 120)
    took = time.monotonic() - started
    assert proc.returncode == 1, f"stdout:\n{out}\nstderr:\n{err}"
    failed = [line for line in err.splitlines() if "Failed" in line]
    assert len(failed) == 1, err
    assert "configuration error: edl trainer: EDL_WORKSPACE: not a directory: " \
        "/nonexistent-workspace" in failed[0]
    assert took < 45, f"took {took:.1f} s"  # interpreter and pod starts on a loaded machine
