"""The tracking finalizer on trainer pods, on the real control plane (issue 29, item 2).

A finished trainer pod must be counted even when someone deletes it first (PodGC, the
descheduler, a user's cleanup) while no controller is watching (a fail-over). Here every
crashed trainer of "crashing" (kwok's pod-crash stage: exit 1) is force-deleted the
moment the test sees it Failed, and a succeeded trainer of "finisher" is force-deleted
at once, while the first controller is dead (SIGKILL) and the second waits for its
Lease. The finalizer keeps each pod until the second controller has counted it: every
crash is in the Job's ``failed`` when it reaches backoffLimit, the success completes
the job, and no pod is left holding the finalizer. The same with kube-controller-manager's
PodGC (`--terminated-pod-gc-threshold=1`) as the deleter.
"""

from __future__ import annotations

import signal
import threading
import time

from e2e.control_plane import ControlPlane
from e2e.helpers import SYSTEM_NAMESPACE, trainingjob, wait_tj, wait_trainers
from e2e.rest import ApiError, Rest
from polling import wait_until

FINALIZER = "edl.dev/job-tracking"
CRASH_FLAGS = ("--crash-backoff=1", "--crash-backoff-max=2")


def trainers(rest: Rest, namespace: str, job: str) -> list[dict]:
    return rest.list("Pod", namespace, f"edl.dev/job={job},edl.dev/role=trainer")


def force_delete(rest: Rest, namespace: str, name: str) -> None:
    try:
        rest.call("DELETE", rest.path("Pod", namespace, name),
                  {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
    except ApiError as error:
        if error.code != 404:
            raise


def exit_code(pod: dict) -> int | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        terminated = (status.get("state") or {}).get("terminated")
        if status.get("name") == "trainer" and terminated:
            return int(terminated["exitCode"])
    return None


class Reaper(threading.Thread):
    """Force-deletes every Failed trainer pod of a job as soon as it is seen (unless
    `delete` is False); notes the crashes (exit 1) among them."""

    def __init__(self, rest: Rest, namespace: str, job: str, delete: bool = True) -> None:
        super().__init__(daemon=True)
        self.rest, self.namespace, self.job, self.delete = rest, namespace, job, delete
        self.crashed: set[str] = set()
        self.deleted: set[str] = set()
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            for pod in trainers(self.rest, self.namespace, self.job):
                meta = pod["metadata"]
                if pod["status"].get("phase") != "Failed" or meta["uid"] in self.deleted:
                    continue
                if exit_code(pod) == 1:
                    self.crashed.add(meta["uid"])
                if self.delete:
                    force_delete(self.rest, self.namespace, meta["name"])
                self.deleted.add(meta["uid"])
            time.sleep(0.05)


def succeed(rest: Rest, namespace: str, name: str) -> None:
    """What a kubelet reports when the trainer exits 0 (kwok has no completion stage)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rest.merge("Pod", name, {"status": {
        "phase": "Succeeded",
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted",
                        "lastTransitionTime": now}],
        "containerStatuses": [{
            "name": "trainer", "image": "edl", "imageID": "", "ready": False,
            "restartCount": 0, "started": False,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                     "startedAt": now, "finishedAt": now}}}]}},
        namespace, sub="status")


def test_trainers_deleted_the_moment_they_finish_are_still_counted_across_a_fail_over(
        rest: Rest, namespace: str, start_controller) -> None:
    first = start_controller("replica-a", *CRASH_FLAGS)
    rest.create(trainingjob("finisher", min_instance=1, max_instance=1), namespace)
    wait_trainers(rest, namespace, "finisher", 1)
    (running,) = trainers(rest, namespace, "finisher")
    assert running["metadata"]["finalizers"] == [FINALIZER]

    reaper = Reaper(rest, namespace, "crashing")
    reaper.start()
    try:
        # "crashing" is in PlaneConfig.crash_jobs: its trainers exit 1 0.5 s after Running
        rest.create(trainingjob("crashing", min_instance=3, max_instance=3,
                                fault_tolerant=False), namespace)
        wait_until(lambda: len(trainers(rest, namespace, "crashing")) == 3, 60,
                   "three crashing trainers created")
        first.stop(signal.SIGKILL)  # before they crash: nobody watches them fail
        succeed(rest, namespace, running["metadata"]["name"])
        force_delete(rest, namespace, running["metadata"]["name"])
        wait_until(lambda: len(reaper.crashed) >= 3, 60, "the first three crashes deleted")
        held = trainers(rest, namespace, "crashing") + trainers(rest, namespace, "finisher")
        assert len(held) == 4 and all(p["metadata"].get("deletionTimestamp") for p in held)

        second = start_controller("replica-b", *CRASH_FLAGS)
        wait_until(lambda: (rest.find("Lease", "edl-controller", SYSTEM_NAMESPACE) or {})
                   .get("spec", {}).get("holderIdentity") == "replica-b", 60,
                   "the new controller leads")
        done = wait_tj(rest, namespace, "finisher",
                       lambda t: t if t["status"]["state"] == "Succeeded" else None, timeout=60)
        assert done["status"]["state"] == "Succeeded"
        failed = wait_tj(rest, namespace, "crashing",
                         lambda t: t if t["status"]["state"] == "Failed" else None, timeout=120)
        assert "BackoffLimitExceeded" in failed["status"]["message"]
    finally:
        reaper.halt.set()
        reaper.join(10)

    finisher = rest.get("Job", "finisher-trainer", namespace)
    assert finisher["status"]["succeeded"] == 1 and finisher["status"].get("failed", 0) == 0
    assert finisher["status"]["conditions"][-1]["type"] == "Complete"
    job = rest.get("Job", "crashing-trainer", namespace)
    # every crash counted, none twice: the first three were deleted before anyone saw them
    assert job["status"]["failed"] == len(reaper.crashed) > job["spec"]["backoffLimit"]
    # no pod keeps the finalizer: the deleted ones are gone, the others released
    wait_until(lambda: not any(FINALIZER in (p["metadata"].get("finalizers") or ())
                               for job in ("crashing", "finisher")
                               for p in trainers(rest, namespace, job)), 30,
               "no trainer pod holding the tracking finalizer")
    assert not trainers(rest, namespace, "finisher")  # never replaced: the work was done
    assert second.proc.poll() is None


def test_podgc_deleting_crashed_trainers_during_a_fail_over_loses_no_crash(
        rest: Rest, plane: ControlPlane, namespace: str, start_controller) -> None:
    plane.restart_controller_manager("--terminated-pod-gc-threshold=1")
    watcher = Reaper(rest, namespace, "crashing", delete=False)
    watcher.start()
    try:
        first = start_controller("replica-a", *CRASH_FLAGS)
        rest.create(trainingjob("crashing", min_instance=3, max_instance=3,
                                fault_tolerant=False), namespace)
        wait_until(lambda: len(trainers(rest, namespace, "crashing")) == 3, 60,
                   "three crashing trainers created")
        first.stop(signal.SIGKILL)  # before they crash: nobody watches them fail
        wait_until(lambda: len(watcher.crashed) >= 3, 60, "the first three crashes")

        def collected() -> bool:  # PodGC keeps 1 terminated pod: it deletes the others
            live = {p["metadata"]["uid"]: p for p in trainers(rest, namespace, "crashing")}
            return sum(1 for uid in watcher.crashed if uid not in live
                       or live[uid]["metadata"].get("deletionTimestamp")) >= 2
        wait_until(collected, 60, "PodGC deleting the crashed trainers")

        start_controller("replica-b", *CRASH_FLAGS)
        failed = wait_tj(rest, namespace, "crashing",
                         lambda t: t if t["status"]["state"] == "Failed" else None, timeout=120)
        assert "BackoffLimitExceeded" in failed["status"]["message"]
    finally:
        watcher.halt.set()
        watcher.join(10)
        plane.restart_controller_manager()
    job = rest.get("Job", "crashing-trainer", namespace)
    assert job["status"]["failed"] == len(watcher.crashed) > job["spec"]["backoffLimit"]
