"""Jobs that cannot run: a trainer that crashes (kwok's pod-crash stage exits it with 1) and
a job whose problems only edl can see. Both end `Failed` with the reason in status; the
controller keeps serving a healthy job beside them.

The crash takes minutes on purpose: the upstream Job controller waits 10 s, 20 s, 40 s ...
(doubling) before replacing failed pods, and the trainer Job's backoffLimit is
max(6, 2 x max-instance). With 3 trainers the 7th failure comes in the third round,
about 6 minutes in.
"""

from __future__ import annotations

import pytest

from e2e.helpers import trainingjob, wait_tj, wait_trainers
from e2e.kwok_stages import CRASH_MESSAGE
from e2e.rest import Rest


def failed_condition(tj: dict) -> dict:
    return next(c for c in tj["status"]["conditions"] if c["type"] == "Failed")


def test_invalid_job_fails_with_every_problem_and_can_be_fixed(
        rest: Rest, namespace: str, start_controller) -> None:
    start_controller("replica-a")
    job = trainingjob("invalid", min_instance=1, max_instance=2)
    job["spec"]["trainer"]["resources"]["requests"]["cpu"] = "2"  # above its limit of 1
    job["spec"]["trainer"]["resources"]["limits"]["nvidia.com/gpu"] = "0.5"
    rest.create(job, namespace)
    tj = wait_tj(rest, namespace, "invalid", lambda t: t if t["status"]["state"] == "Failed"
                 else None)
    message = tj["status"]["message"]
    assert "cpu" in message and "gpu" in message.lower(), message
    condition = failed_condition(tj)
    assert (condition["status"], condition["reason"]) == ("True", "InvalidSpec")
    warnings = [e for e in rest.events_for(namespace, "invalid") if e["type"] == "Warning"]
    assert warnings and "cpu" in warnings[-1]["message"]
    assert rest.find("Job", "invalid-trainer", namespace) is None

    # `kubectl edit` the job right: it starts.
    rest.merge("TrainingJob", "invalid", {"spec": {"trainer": {"resources": {
        "requests": {"cpu": "500m"}, "limits": {"nvidia.com/gpu": None}}}}}, namespace)
    wait_trainers(rest, namespace, "invalid", 2)
    wait_tj(rest, namespace, "invalid", lambda t: t["status"]["state"] == "Running")


@pytest.mark.timeout(1200)
def test_crashing_trainer_fails_the_job_after_its_backoff_limit(
        rest: Rest, namespace: str, start_controller) -> None:
    controller = start_controller("replica-a")
    # "crashing" is in PlaneConfig.crash_jobs: its trainers exit 1 half a second after start.
    rest.create(trainingjob("crashing", min_instance=3, max_instance=3, fault_tolerant=False),
                namespace)
    rest.create(trainingjob("healthy", min_instance=1, max_instance=2), namespace)
    wait_trainers(rest, namespace, "healthy", 2)

    tj = wait_tj(rest, namespace, "crashing",
                 lambda t: t if t["status"]["state"] == "Failed" else None, timeout=900)
    message = tj["status"]["message"]
    assert "the trainer Job failed: BackoffLimitExceeded" in message, message
    assert "(exit 1)" in message and CRASH_MESSAGE in message, message
    condition = failed_condition(tj)
    assert (condition["status"], condition["reason"]) == ("True", "TrainerJobFailed")
    job = rest.get("Job", "crashing-trainer", namespace)
    assert job["status"]["failed"] > job["spec"]["backoffLimit"] == 6
    warnings = [e for e in rest.events_for(namespace, "crashing") if e["type"] == "Warning"]
    assert any("BackoffLimitExceeded" in e["message"] for e in warnings)

    # The controller survived and still serves the healthy job.
    assert controller.proc.poll() is None, controller.text()[-2000:]
    wait_trainers(rest, namespace, "healthy", 2)
    healthy = rest.get("TrainingJob", "healthy", namespace)
    assert healthy["status"]["state"] == "Running"
