"""Issue 30, case 3 (and case 1's filler): on the real node, a Deployment of ordinary
priority (0, above the trainers' -10) lands on a node full of trainers. kube-scheduler
preempts a trainer: the kubelet's SIGTERM reaches `edl trainer` in its container, which
says goodbye to the master and hands its task back; the job keeps running with fewer
trainers, grows back once the Deployment goes, and ends with every task of every pass
done exactly once and none failed, as the master's own task accounting (its progress
record in the job's etcd, read through the API server) reports.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from e2e.helpers import parallelism, trainingjob, wait_tj
from e2e.rest import Rest
from node.cluster import (
    NodeCluster,
    PodWatch,
    condition,
    exit_code,
    filler,
    free_cpu,
    master_progress,
    pod_log,
    runtime_volumes,
)
from polling import wait_until

JOB = "elastic"
PASSES = 100  # long enough to be preempted and to grow back well before the end (at 60 a
# run at load 7 finished 8 s after the preemption: its growth to 3 had taken most of the job)
TRAINER_CPU = 500  # millicores
MAX_TRAINERS = 3
TRAINER_SIGTERM_EXIT = 143  # edl.runtime.trainer.api.SIGTERM_EXIT


def note(what: str) -> None:
    """A timestamped line in the test's captured output (shown if it fails)."""
    print(f"{time.strftime('%X')} {what}", flush=True)


def _trainers(rest: Rest, namespace: str) -> list[dict[str, Any]]:
    return [p for p in rest.list("Pod", namespace, f"edl.dev/job={JOB},edl.dev/role=trainer")
            if not p["metadata"].get("deletionTimestamp")]


def settled(rest: Rest, namespace: str, at_least: int = 1) -> int | None:
    """The trainer count once every trainer the Job wants runs, else None."""
    pods = _trainers(rest, namespace)
    want = parallelism(rest, namespace, JOB)
    if want is None or want < at_least or len(pods) != want:
        return None
    return want if all(p["status"].get("phase") == "Running" for p in pods) else None


def _summary(seen: dict[str, list[dict[str, Any]]]) -> dict[str, list[Any]]:
    """Each pod's phases, DisruptionTarget reasons and trainer exit codes, in order."""
    return {name: [(v["status"].get("phase"), (condition(v, "DisruptionTarget") or {}).get(
        "reason"), exit_code(v, "trainer"), bool(v["metadata"].get("deletionTimestamp")))
        for v in versions] for name, versions in seen.items()}


@pytest.mark.timeout(600)
def test_a_preempted_trainer_hands_its_task_back_and_the_job_grows_back(
        node_cluster: NodeCluster, namespace: str, start_controller) -> None:
    rest = node_cluster.rest
    # the trainers' PriorityClass of deploy/controller.yaml (-10, below any ordinary pod)
    start_controller("elastic", "--trainer-priority-class=edl-elastic-trainer")
    volumes, mounts = runtime_volumes(node_cluster)
    job = trainingjob(JOB, min_instance=1, max_instance=MAX_TRAINERS, trainer_cpu=f"{TRAINER_CPU}m",
                      passes=PASSES)
    job["spec"]["image"] = node_cluster.image
    job["spec"]["volumes"], job["spec"]["volumeMounts"] = volumes, mounts
    rest.create(job, namespace)
    note("created")
    # 3 trainers fill the node (2 CPUs: the master and its sidecar ask 200m, the
    # pservers 200m): the job is at its max, no trainer still to come
    full = wait_until(lambda: settled(rest, namespace) == MAX_TRAINERS and MAX_TRAINERS, 240,
                      f"the job grown to {MAX_TRAINERS} trainers, every one running")
    note(f"settled at {full}")
    first = wait_until(lambda: (p := master_progress(node_cluster, namespace, JOB)) and
                       p.get("tasks_done", 0) + p.get("pass", 0) > 0 and p, 240,
                       "the trainers training (the master counting finished tasks)")
    note(f"training: {full} trainers, pass {first['pass']}, {first['tasks_done']} tasks done")
    assert not first["finished"], first

    # room for the filler only if one trainer goes: it asks for the free CPU and 80 %
    # of a trainer
    want = free_cpu(node_cluster) + TRAINER_CPU * 4 // 5
    with PodWatch(node_cluster, namespace, f"edl.dev/job={JOB},edl.dev/role=trainer") as watch:
        rest.create(filler(namespace, want), namespace)
        wait_until(lambda: any(p["status"].get("phase") == "Running"
                               for p in rest.list("Pod", namespace, "app=filler")),
                   90, "the filler running")
        # kube-scheduler, not edl, made the room: the trainer it chose carries its
        # DisruptionTarget condition; the kubelet's last status shows the trainer
        # ended on SIGTERM (edl trainer's exit 143; a SIGKILL at the grace period: 137)
        def ended() -> dict[str, set[int]]:
            return {name: codes for name, versions in watch.seen().items()
                    if any((c := condition(v, "DisruptionTarget")) and
                           c.get("reason") == "PreemptionByScheduler" for v in versions)
                    and (codes := {exit_code(v, "trainer") for v in versions} - {None})}
        try:
            victims = wait_until(ended, 60, "a trainer preempted by kube-scheduler, and its end")
        except AssertionError as error:
            raise AssertionError(f"{error}; seen: {_summary(watch.seen())}") from None
    note(f"preempted: {victims}")
    assert len(victims) == 1, victims
    victim, codes = victims.popitem()
    assert codes == {TRAINER_SIGTERM_EXIT}, (victim, codes)
    # `edl trainer` said goodbye: its task back in the queue at once, not at the trainer
    # TTL, as the master's log shows
    master = rest.list("Pod", namespace, f"edl.dev/job={JOB},edl.dev/role=master")[0]
    left = wait_until(lambda: re.search(
        rf"trainer {re.escape(victim)} left; tasks back in the queue: \[[0-9, ]*\]",
        pod_log(node_cluster, namespace, master["metadata"]["name"], "master")), 30,
        f"the master told that {victim} left")
    gone = wait_until(lambda: (p := master_progress(node_cluster, namespace, JOB)) and
                      not p["trainers"].get(victim, {"alive": True})["alive"] and p, 30,
                      f"the master's accounting without {victim}")
    assert not gone["finished"], ("the job ended before the test could see it grow back",
                                  gone)
    note(f"the master saw it leave: {left.group(0)}")
    # the job goes on with the trainers left, and none of this was a crash
    wait_until(lambda: (n := settled(rest, namespace)) is not None and n < full, 60,
               "the job settled below its full size")
    assert rest.get("TrainingJob", JOB, namespace)["status"]["state"] == "Running"
    assert not (rest.get("Job", f"{JOB}-trainer", namespace).get("status") or {}).get(
        "failed"), "a preempted trainer counted as failed"

    rest.delete("Deployment", "filler", namespace)
    wait_until(lambda: settled(rest, namespace) == full, 120,
               f"the job back at {full} trainers once the filler went")
    note("grown back")
    back = wait_until(lambda: master_progress(node_cluster, namespace, JOB), 30,
                      "the master's progress after the growth")
    assert not back["finished"], back

    # read often: the master pod goes a few seconds after its last record (the job done)
    final = wait_until(lambda: (p := master_progress(node_cluster, namespace, JOB))
                       and p["finished"] and p, 300, "the master's final accounting", interval=0.1)
    tasks = sum(t["tasks"] for t in final["trainers"].values())
    assert tasks == PASSES * final["tasks_total"], (left.group(0), final)
    assert final["tasks_failed"] == 0, final
    wait_tj(rest, namespace, JOB, lambda t: t["status"]["state"] == "Succeeded", 300,
            f"{JOB} Succeeded")
    # case 1's measure: the model still reaches its accuracy (each trainer's own log)
    pods = rest.list("Pod", namespace, f"edl.dev/job={JOB},edl.dev/role=trainer")
    done = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Succeeded"]
    accuracies = [float(m.group(1)) for name in done
                  if (m := re.search(r"test accuracy ([0-9.]+)",
                                     pod_log(node_cluster, namespace, name)))]
    assert accuracies and min(accuracies) >= 0.95, accuracies
