"""`edl logs`, `edl status --all / RUN / -o json`, `-o json` of validate/render/plan, the
plan table, `-V`, "did you mean" for a mistyped command (issue 12, run management)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edl.local.status import PodLine, RunSnapshot, write_snapshot

REPO = Path(__file__).resolve().parents[2]


def edl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edl.cli.main", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Two finished runs of `digits` and one of `other`, with pod logs."""
    root = tmp_path / "runs"
    for name, state, at in (("digits-20260101-000000", "Failed", 1.0),
                            ("digits-20260102-000000", "Succeeded", 2.0),
                            ("other-20260103-000000", "Succeeded", 3.0)):
        run_dir = root / name
        run_dir.mkdir(parents=True)
        job = name.split("-")[0]
        write_snapshot(run_dir, RunSnapshot(
            job=job, state=state, passes=5, pass_index=4, started_at=at, updated_at=at + 60,
            pods=[PodLine(f"{job}-master-00000", "master", "Succeeded")],
        ))
        (run_dir / f"{job}-master-00000.log").write_text(f"master of {name}\n")
        (run_dir / f"{job}-pserver-00000.log").write_text("p0\n")
        (run_dir / f"{job}-pserver-00001.log").write_text("p1\n")
        (run_dir / "status.json").touch()
        time.sleep(0.01)  # newest = last written
    return root


def test_logs_by_run_and_pod(runs: Path) -> None:
    done = edl("logs", "--runs-dir", str(runs), "master")
    assert done.returncode == 0 and done.stdout == "master of other-20260103-000000\n"
    done = edl("logs", "--runs-dir", str(runs), "digits", "master")
    assert done.stdout == "master of digits-20260102-000000\n"
    done = edl("logs", "--runs-dir", str(runs), "digits-20260101-000000", "pserver-00001")
    assert done.stdout == "p1\n"
    done = edl("logs", "--runs-dir", str(runs), "digits", "pserver")
    assert done.returncode == 1 and "matches 2 pods" in done.stderr
    assert len(done.stderr.splitlines()) == 1
    done = edl("logs", "--runs-dir", str(runs), "nope", "master")
    assert done.returncode == 1 and "no run 'nope'" in done.stderr


def test_status_lists_runs_and_takes_a_run_name(runs: Path) -> None:
    done = edl("status", "--runs-dir", str(runs), "--all")
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["RUN", "STATE", "PASS"]
    assert [line.split()[0] for line in lines[1:]] == [
        "other-20260103-000000", "digits-20260102-000000", "digits-20260101-000000"
    ]
    listed = json.loads(edl("status", "--runs-dir", str(runs), "-a", "digits", "-o", "json").stdout)
    assert [r["run"] for r in listed] == ["digits-20260102-000000", "digits-20260101-000000"]
    done = edl("status", "--runs-dir", str(runs), "digits-20260101-000000", "-o", "json")
    assert done.returncode == 1  # a Failed run
    assert json.loads(done.stdout)["state"] == "Failed"


def test_json_output_of_validate_render_plan() -> None:
    jobs = REPO / "examples" / "jobs"
    valid = json.loads(edl("validate", "-o", "json", str(jobs / "mnist.yaml")).stdout)
    assert valid["valid"] and valid["job"]["metadata"]["name"] == "mnist"
    done = edl("validate", "-o", "json", str(jobs / "invalid" / "many-problems.yaml"))
    report = json.loads(done.stdout)
    assert done.returncode == 1 and not report["valid"]
    assert {"path": "spec.pserver.min-instance", "message": "must be >= 1 (got 0)"} in \
        report["problems"]
    rendered = json.loads(edl("render", "-o", "json", str(jobs / "mnist.yaml")).stdout)
    assert rendered["kind"] == "List" and len(rendered["items"]) == 4
    state = str(REPO / "examples" / "snapshots" / "training-and-service.json")
    table = edl("plan", state).stdout.splitlines()
    assert table[1].split() == ["NAMESPACE", "NAME", "PARALLELISM", "TARGET", "REASON"]
    planned = json.loads(edl("plan", "-o", "json", state).stdout)
    assert len(table) == 2 + len(planned["jobs"])


def test_version_and_did_you_mean() -> None:
    assert edl("-V").stdout.startswith("edl, version ")
    done = edl("statsu")
    assert done.returncode == 2
    assert done.stderr.strip() == "edl: no such command 'statsu'; did you mean 'status'? " \
        "(see 'edl --help')"
