"""The trainer Job's contract on the real control plane (issue 20): the API server
validates every status edl writes for its managed trainer Job, kube-controller-manager
runs beside it (and must leave the Job alone), and `edl controller` restarts.

Checked: a trainer exiting 78 at parallelism 4 fails the job at once and a restarted
controller makes no pod for it; a TrainingJob deleted and re-created under the same
name never counts the old incarnation's pods; a suspended then resumed trainer Job
(what Kueue does) runs no pod while suspended; a ResourceQuota refusing trainer pods
shows in the TrainingJob's status and a Warning Event in the API server's words; an
edit via `kubectl apply` that running pods cannot take is reported as not applied.
No controller log shows a refused status write (409/422).
"""

from __future__ import annotations

import re
import signal
import time

from e2e.helpers import (
    SYSTEM_NAMESPACE,
    parallelism,
    trainer_pods,
    trainingjob,
    wait_tj,
    wait_trainers,
)
from e2e.kwok_stages import CONFIG_ERROR_MESSAGE
from e2e.rest import Rest
from polling import wait_until

REFUSED_WRITE = re.compile(r"HTTP/1\.1 (409|422)|\bConflict\b|Unprocessable|is invalid")


def all_trainer_pods(rest: Rest, namespace: str, job: str) -> list[dict]:
    return rest.list("Pod", namespace, f"edl.dev/job={job},edl.dev/role=trainer")


def trainer_job(rest: Rest, namespace: str, job: str) -> dict:
    return rest.get("Job", f"{job}-trainer", namespace)


def true_conditions(job: dict) -> dict[str, dict]:
    return {c["type"]: c for c in (job.get("status") or {}).get("conditions") or ()
            if c["status"] == "True"}


def tj_condition(tj: dict, kind: str) -> tuple[str, str]:
    """(status, reason) of the TrainingJob's condition `kind`, what `kubectl wait` reads."""
    for condition in (tj.get("status") or {}).get("conditions") or ():
        if condition["type"] == kind:
            return condition["status"], condition.get("reason", "")
    return "", ""


CONFLICT = re.compile(r"HTTP/1\.1 409|\bConflict\b")


def no_refused_writes(*controllers, raced: tuple[tuple[int, int], ...] = ()) -> None:
    """No status write refused. ``raced``: byte ranges of the (single) controller's log
    where the test itself wrote the trainer Job; a 409 there is the compare-and-swap
    doing its job (the controller read the Job, the test's write landed, the patch's
    resourceVersion was stale: it re-reads and retries), so only a 409 is allowed
    there, never a 422, and never a 409 anywhere else."""
    lines = []
    for c in controllers:
        at = 0
        for line in c.text().splitlines(keepends=True):
            start, at = at, at + len(line.encode())
            if not (REFUSED_WRITE.search(line) and ("status" in line or "Job" in line)):
                continue
            if CONFLICT.search(line) and any(a <= start < b for a, b in raced):
                continue
            lines.append(line.rstrip("\n"))
    assert not lines, "\n".join(lines[:10])


def test_exit_78_at_parallelism_4_fails_at_once_and_stays_failed_after_a_restart(
        rest: Rest, namespace: str, start_controller) -> None:
    first = start_controller("replica-a")
    # "misconfigured" is in PlaneConfig.config_error_jobs: its trainers exit 78
    rest.create(trainingjob("misconfigured", min_instance=4, max_instance=4), namespace)
    started = time.monotonic()
    tj = wait_tj(rest, namespace, "misconfigured",
                 lambda t: t if t["status"]["state"] == "Failed" else None, timeout=60)
    assert time.monotonic() - started < 45  # at once: no backoffLimit rounds
    assert "PodFailurePolicy" in tj["status"]["message"]
    assert CONFIG_ERROR_MESSAGE.split(" (")[0] in tj["status"]["message"]
    job = trainer_job(rest, namespace, "misconfigured")
    held = true_conditions(job)
    assert {"FailureTarget", "Failed"} <= set(held)
    assert all(c.get("lastTransitionTime") for c in job["status"]["conditions"])
    pods = all_trainer_pods(rest, namespace, "misconfigured")
    assert len(pods) <= 4  # no trainer was ever replaced
    names = {p["metadata"]["name"] for p in pods}

    first.stop(signal.SIGKILL)
    second = start_controller("replica-b")
    wait_until(lambda: (rest.find("Lease", "edl-controller", SYSTEM_NAMESPACE) or {})
               .get("spec", {}).get("holderIdentity") == "replica-b", 60,
               "the new controller leads")
    time.sleep(8)
    after = trainer_job(rest, namespace, "misconfigured")
    assert after["status"] == job["status"]  # nothing resurrected, nothing rewritten
    assert {p["metadata"]["name"] for p in all_trainer_pods(rest, namespace,
                                                             "misconfigured")} <= names
    no_refused_writes(first, second)


def test_a_job_recreated_under_the_same_name_never_counts_the_old_pods(
        rest: Rest, namespace: str, start_controller) -> None:
    controller = start_controller("replica-a")
    rest.create(trainingjob("again", min_instance=2, max_instance=2), namespace)
    wait_trainers(rest, namespace, "again", 2)
    old_uid = trainer_job(rest, namespace, "again")["metadata"]["uid"]
    rest.delete("TrainingJob", "again", namespace)
    rest.create(trainingjob("again", min_instance=3, max_instance=3), namespace)
    wait_until(lambda: trainer_job_uid(rest, namespace) not in (None, old_uid), 60,
               "the new trainer Job")
    wait_trainers(rest, namespace, "again", 3)
    job = trainer_job(rest, namespace, "again")
    assert not true_conditions(job)
    assert job["status"].get("failed", 0) == 0 and job["status"].get("succeeded", 0) == 0
    uids = {ref["uid"] for p in all_trainer_pods(rest, namespace, "again")
            if not p["metadata"].get("deletionTimestamp")
            for ref in p["metadata"]["ownerReferences"]}
    assert uids == {job["metadata"]["uid"]}
    no_refused_writes(controller)


def trainer_job_uid(rest: Rest, namespace: str) -> str | None:
    found = rest.find("Job", "again-trainer", namespace)
    return None if found is None else found["metadata"]["uid"]


def test_a_suspended_then_resumed_trainer_job(
        rest: Rest, namespace: str, start_controller) -> None:
    controller = start_controller("replica-a")
    rest.create(trainingjob("queued", min_instance=2, max_instance=2), namespace)
    wait_trainers(rest, namespace, "queued", 2)
    suspending = controller.offset()
    rest.merge("Job", "queued-trainer", {"spec": {"suspend": True}}, namespace)  # as Kueue
    wait_until(lambda: not all_trainer_pods(rest, namespace, "queued"), 60, "no trainer pod")
    job = wait_until(lambda: (lambda j: j if "Suspended" in true_conditions(j) else None)(
        trainer_job(rest, namespace, "queued")), 30, "Suspended=True")
    raced = [(suspending, controller.offset())]
    assert job["status"].get("active", 0) == 0 and not job["status"].get("startTime")
    held = wait_tj(rest, namespace, "queued",
                   lambda t: t if tj_condition(t, "Suspended")[0] == "True" else None)
    assert "suspended" in held["status"]["message"]
    assert tj_condition(held, "Suspended")[1] == "TrainerJobSuspended"
    time.sleep(3)
    assert not all_trainer_pods(rest, namespace, "queued")  # none made while suspended
    resuming = controller.offset()
    rest.merge("Job", "queued-trainer", {"spec": {"suspend": False}}, namespace)  # admitted
    wait_trainers(rest, namespace, "queued", 2)
    job = trainer_job(rest, namespace, "queued")
    (suspended,) = [c for c in job["status"]["conditions"] if c["type"] == "Suspended"]
    assert (suspended["status"], suspended["reason"]) == ("False", "JobResumed")
    assert job["status"]["startTime"]
    wait_tj(rest, namespace, "queued",
            lambda t: tj_condition(t, "Suspended") == ("False", "NotSuspended"))
    raced.append((resuming, controller.offset()))
    # the test's two spec writes race the controller's status writes (a 409, retried);
    # outside them, or as a 422, a refused write is a defect
    no_refused_writes(controller, raced=tuple(raced))


def test_refused_trainer_pods_are_reported_in_the_api_servers_words(
        rest: Rest, namespace: str, start_controller) -> None:
    controller = start_controller("replica-a")
    start = controller.offset()  # the quota's refusals say "forbidden": expected here
    # master + pserver take the two pods the quota allows: every trainer is refused
    rest.create({"apiVersion": "v1", "kind": "ResourceQuota",
                 "metadata": {"name": "pods", "namespace": namespace},
                 "spec": {"hard": {"pods": "2"}}}, namespace)
    rest.create(trainingjob("quota", min_instance=2, max_instance=2), namespace)
    tj = wait_tj(rest, namespace, "quota",
                 lambda t: t if "exceeded quota" in t["status"]["message"] else None, 60)
    assert tj["status"]["state"] == "Created", tj["status"]
    # the status names the refusal before the FailedCreate Event is posted
    events = wait_until(
        lambda: [e for e in rest.events_for(namespace, "quota") if e["reason"] == "FailedCreate"],
        30, "a FailedCreate Event")
    assert "exceeded quota" in events[-1]["message"]
    assert events[-1]["type"] == "Warning"
    # no Event claims trainers were made (edl posts ScalingUp for a target, never ScaledUp)
    assert not [e for e in rest.events_for(namespace, "quota") if e["reason"] == "ScaledUp"]
    rest.merge("ResourceQuota", "pods", {"spec": {"hard": {"pods": "10"}}}, namespace)
    wait_trainers(rest, namespace, "quota", 2, timeout=120)
    wait_tj(rest, namespace, "quota", lambda t: "exceeded quota" not in t["status"]["message"])
    controller.excused.append((start, controller.offset()))
    no_refused_writes(controller)


def test_an_edit_with_kubectl_apply_is_reported_when_the_pods_cannot_take_it(
        rest: Rest, namespace: str, start_controller) -> None:
    controller = start_controller("replica-a")
    job = trainingjob("edited", min_instance=2, max_instance=2)
    rest.apply([job], namespace)
    wait_trainers(rest, namespace, "edited", 2)
    before = set(trainer_pods(rest, namespace, "edited"))
    job["spec"]["passes"] = 9
    rest.apply([job], namespace)
    tj = wait_tj(rest, namespace, "edited",
                 lambda t: t if "spec change not applied" in t["status"]["message"] else None)
    assert "trainer" in tj["status"]["message"]
    assert set(trainer_pods(rest, namespace, "edited")) == before
    assert parallelism(rest, namespace, "edited") == 2
    no_refused_writes(controller)


def test_a_job_whose_trainers_finish_is_complete(
        rest: Rest, namespace: str, start_controller) -> None:
    """`kubectl wait --for=condition=Complete tj/finishing` reads exactly this condition."""
    start_controller("replica-a")
    rest.create(trainingjob("finishing", min_instance=2, max_instance=2), namespace)
    tj = wait_tj(rest, namespace, "finishing",
                 lambda t: t if tj_condition(t, "Complete")[0] == "True" else None, 90,
                 "condition Complete True")
    assert tj["status"]["state"] == "Succeeded"
    assert tj_condition(tj, "Complete") == ("True", "TrainersFinished")
    assert tj_condition(tj, "Failed") == ("False", "NoFailure")
    assert tj_condition(tj, "Suspended") == ("False", "NotSuspended")
    (complete,) = [c for c in tj["status"]["conditions"] if c["type"] == "Complete"]
    assert complete["lastTransitionTime"] and complete["message"] == "trainers finished"
