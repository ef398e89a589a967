"""`edl.local.fit`: what a job needs at least, for either mode."""

from __future__ import annotations

from pathlib import Path

from edl.api.jobfile import load_trainingjob
from edl.api.trainingjob import TrainingJob
from edl.jobparser import JobParser
from edl.local.fit import job_footprint, shortfall

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> TrainingJob:
    return JobParser().validate(load_trainingjob(EXAMPLES / name / "job.yaml"))


def test_a_parameter_server_job_needs_master_pservers_and_min_trainers():
    job = load("digits")
    footprint = job_footprint(job)
    assert set(footprint) == {"master", "pserver", "trainer"}
    assert footprint["trainer"][0] == job.spec.trainer.min_instance


def test_a_collective_job_has_no_pservers_to_fit():
    job = load("digits-ddp")
    footprint = job_footprint(job)
    assert set(footprint) == {"master", "trainer"}
    assert shortfall(footprint, (10**6, 10**6, 0)) == ""
    assert "cpu" in shortfall(footprint, (1, 10**6, 0))
