"""Jobs that cannot run: a trainer that crashes (kwok's pod-crash stage exits it with 1) and
a job whose problems only edl can see. Both end `Failed` with the reason in status; the
controller keeps serving a healthy job beside them.

edl's trainer controller replaces a crashed trainer after a back-off that doubles per
crash in a row (production: 10 s, capped at 10 min), and the trainer Job's backoffLimit is
max(6, 2 x max-instance): with 3 trainers the 7th failure comes in the third round. At
the production values that is about 6 minutes of waiting (40 s, then 320 s); the test
runs the controller with `--crash-backoff=1 --crash-backoff-max=8` (about 4 s, then 8 s).
"""

from __future__ import annotations

import time

from e2e.helpers import trainingjob, wait_tj, wait_trainers
from e2e.kwok_stages import CRASH_MESSAGE
from e2e.rest import Rest
from polling import wait_until


def warning_events(rest: Rest, namespace: str, name: str) -> list[dict]:
    return [e for e in rest.events_for(namespace, name) if e["type"] == "Warning"]


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
    # the Warning Event is posted after the status write the test just saw
    warnings = wait_until(lambda: warning_events(rest, namespace, "invalid"), 30, "a Warning")
    assert "cpu" in warnings[-1]["message"]
    assert rest.find("Job", "invalid-trainer", namespace) is None

    # `kubectl edit` the job right: it starts.
    rest.merge("TrainingJob", "invalid", {"spec": {"trainer": {"resources": {
        "requests": {"cpu": "500m"}, "limits": {"nvidia.com/gpu": None}}}}}, namespace)
    wait_trainers(rest, namespace, "invalid", 2)
    wait_tj(rest, namespace, "invalid", lambda t: t["status"]["state"] == "Running")


def test_crashing_trainer_fails_the_job_after_its_backoff_limit(
        rest: Rest, namespace: str, start_controller) -> None:
    """Shortened: the crash back-off (1 s doubling, cap 8 s, instead of 10 s doubling, cap
    10 min). What is proved — crashes are counted against backoffLimit, the Job and the
    TrainingJob fail with the crash's exit code and message, the controller keeps serving
    — does not depend on how long each replacement waits; that it waits at all is checked
    below, and the production delays are asserted in tests/control/test_managed_trainers.py
    (virtual time) and tests/kube/test_managed_trainers_kmock.py (KubeCluster, 10 s)."""
    controller = start_controller("replica-a", "--crash-backoff=1", "--crash-backoff-max=8")
    # "crashing" is in PlaneConfig.crash_jobs: its trainers exit 1 half a second after start.
    created = time.monotonic()
    rest.create(trainingjob("crashing", min_instance=3, max_instance=3, fault_tolerant=False),
                namespace)
    rest.create(trainingjob("healthy", min_instance=1, max_instance=2), namespace)
    wait_trainers(rest, namespace, "healthy", 2)

    tj = wait_tj(rest, namespace, "crashing",
                 lambda t: t if t["status"]["state"] == "Failed" else None, timeout=300)
    # The 7th crash is in the third round: the first replacements waited at least 1 s
    # (the first delay), the second ones 8 s (four or more crashes in a row: the cap).
    assert time.monotonic() - created >= 9, "crash replacements did not wait the back-off"
    message = tj["status"]["message"]
    assert "the trainer Job failed: BackoffLimitExceeded" in message, message
    assert "(exit 1)" in message and CRASH_MESSAGE in message, message
    condition = failed_condition(tj)
    assert (condition["status"], condition["reason"]) == ("True", "TrainerJobFailed")
    job = rest.get("Job", "crashing-trainer", namespace)
    assert job["status"]["failed"] > job["spec"]["backoffLimit"] == 6
    wait_until(lambda: any("BackoffLimitExceeded" in e["message"]
                           for e in warning_events(rest, namespace, "crashing")),
               30, "a BackoffLimitExceeded Warning")

    # The controller survived and still serves the healthy job.
    assert controller.proc.poll() is None, controller.text()[-2000:]
    wait_trainers(rest, namespace, "healthy", 2)
    healthy = rest.get("TrainingJob", "healthy", namespace)
    assert healthy["status"]["state"] == "Running"
