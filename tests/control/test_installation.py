"""The installation name: what a process stamps on trainer Jobs and pods, which jobs it
runs, and the names it refuses (edl controller --installation)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edl.api import installation
from edl.control.trainer_pods import pod_state, trainer_pod
from edl.control.trainers import is_managed

EDL = str(Path(sys.executable).with_name("edl"))


@pytest.fixture
def team_b() -> Iterator[None]:
    installation.set_installation("team-b")
    yield
    installation.set_installation(installation.DEFAULT_INSTALLATION)


def test_the_default_installation_keeps_the_shipped_marks() -> None:
    assert installation.managed_by() == "edl.dev/trainer-controller"
    assert installation.runs({"metadata": {"name": "x"}})
    assert not installation.runs({"metadata": {"labels": {"edl.dev/installation": "b"}}})


def test_an_installation_stamps_and_claims_only_its_own(team_b: None) -> None:
    job = {"metadata": {"name": "j-trainer", "namespace": "ns", "uid": "u"},
           "spec": {"managedBy": "edl.dev/team-b", "template": {"spec": {}}}}
    pod = trainer_pod(job, "j-trainer-abcde")
    assert pod["metadata"]["annotations"]["edl.dev/created-by"] == "team-b"
    assert pod_state(pod).ours and is_managed(job)
    other = {**job, "spec": {"managedBy": "edl.dev/trainer-controller"}}
    assert not is_managed(other)
    pod["metadata"]["annotations"]["edl.dev/created-by"] = "trainer-controller"
    assert not pod_state(pod).ours  # another installation's pod is never claimed
    assert installation.runs({"metadata": {"labels": {"edl.dev/installation": "team-b"}}})
    assert not installation.runs({"metadata": {"name": "unlabelled"}})


@pytest.mark.parametrize("name", ["Team", "-a", "a_b", "x" * 56, ""])
def test_a_bad_installation_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="installation name"):
        installation.set_installation(name)
    assert installation.current() == installation.DEFAULT_INSTALLATION


def test_edl_controller_refuses_a_bad_installation_name_with_a_clear_error() -> None:
    done = subprocess.run([EDL, "controller", "--installation=Team_B"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2 and "--installation: installation name" in done.stderr
    assert "Traceback" not in done.stderr
