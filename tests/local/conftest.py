"""Helpers for local-run tests: job files, process scans, `edl run` as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from polling import wait_until

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits"
EDL = str(Path(sys.executable).with_name("edl"))


def digits_job(
    tmp_path: Path, name: str = "digits", *, workspace: Path = DIGITS, **spec: Any
) -> Path:
    """The digits example with spec overrides, workspace pinned to the example's directory
    (or to `workspace`, e.g. a paced copy from tests/paced.py)."""
    job = yaml.safe_load((DIGITS / "job.yaml").read_text())
    job["metadata"]["name"] = name
    job["spec"]["trainer"]["workspace"] = str(workspace)
    job["spec"].update(spec)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def start_edl_run(tmp_path: Path, job_file: Path, *args: str) -> subprocess.Popen[str]:
    # The run's temporary files (etcd's data dir) go under tmp_path, so even a
    # SIGKILLed run, which cannot clean up, leaves nothing in the machine's /tmp.
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir(exist_ok=True)
    return subprocess.Popen(
        [EDL, "run", str(job_file), "--plain", "--runs-dir", str(tmp_path / "runs"), *args],
        env={**os.environ, "TMPDIR": str(private_tmp)},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # our SIGINT goes to edl run alone, as a terminal's would
    )


def run_dir_of(tmp_path: Path) -> Path | None:
    runs = sorted((tmp_path / "runs").glob("*/status.json")) if (tmp_path / "runs").exists() else []
    return runs[-1].parent if runs else None


wait_for = wait_until  # the shared poller, under the name these tests use


def descendants(root: int) -> set[int]:
    """Every live process below root, from /proc (ppid links), without psutil."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"
