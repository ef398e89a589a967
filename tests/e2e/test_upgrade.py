"""A controller upgrade as a Deployment's rolling update does it, mid-job: the new
replica starts beside the old one as a standby, the old one is stopped with SIGTERM and
releases the Lease, the new one leads within seconds. Nothing of the running job is lost
or redone: the same pods (by UID) run throughout, no trainer is recreated or counted as
failed, the TrainingJob stays Running, and the new leader acts on the next edit."""

from __future__ import annotations

import time

from e2e.helpers import SYSTEM_NAMESPACE, parallelism, trainingjob, wait_tj, wait_trainers
from e2e.rest import Rest
from polling import wait_until

JOB = "rolling"


def holder(rest: Rest) -> str:
    lease = rest.find("Lease", "edl-controller", SYSTEM_NAMESPACE) or {}
    return lease.get("spec", {}).get("holderIdentity") or ""


def pods(rest: Rest, namespace: str) -> dict[str, str]:
    """The job's live pods: name -> UID."""
    return {p["metadata"]["name"]: p["metadata"]["uid"]
            for p in rest.list("Pod", namespace, f"edl.dev/job={JOB}")
            if not p["metadata"].get("deletionTimestamp")}


def test_a_rolling_controller_upgrade_mid_job_loses_nothing(
        rest: Rest, namespace: str, start_controller) -> None:
    old = start_controller("old-release")
    wait_until(lambda: holder(rest) == "old-release", 60, "the old release leads")
    rest.create(trainingjob(JOB, min_instance=2, max_instance=4), namespace)
    wait_trainers(rest, namespace, JOB, 4)
    wait_tj(rest, namespace, JOB, lambda t: t["status"]["trainers"]["running"] == 4)
    before = pods(rest, namespace)
    assert len(before) == 1 + 2 + 4  # master, pservers, trainers

    new = start_controller("new-release")  # the rollout's new pod: a standby first
    time.sleep(3)
    assert holder(rest) == "old-release"
    stopped = time.monotonic()
    old.stop()  # SIGTERM, as the rollout stops the old pod: it releases the Lease
    assert old.proc.returncode == 0, old.text()[-2000:]
    wait_until(lambda: holder(rest) == "new-release", 20, "the new release leads")
    assert time.monotonic() - stopped < 15  # released, not left to expire

    time.sleep(5)  # several ticks of the new leader
    assert pods(rest, namespace) == before  # nothing recreated, nothing deleted
    assert parallelism(rest, namespace, JOB) == 4
    trainer_job = rest.get("Job", f"{JOB}-trainer", namespace)
    assert not trainer_job["status"].get("failed"), trainer_job["status"]
    tj = rest.get("TrainingJob", JOB, namespace)
    assert tj["status"]["state"] == "Running", tj["status"]
    # the new leader acts: a new guarantee (kubectl scale) is observed and kept
    rest.merge("TrainingJob", JOB, {"spec": {"replicas": 3}}, namespace, sub="scale")
    wait_tj(rest, namespace, JOB, lambda t: t["status"]["observedGeneration"] == 2, 30,
            "the new leader observed the edit")
    assert pods(rest, namespace) == before
    assert new.proc.poll() is None
