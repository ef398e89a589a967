"""The Controller ends a TrainingJob with its trainer Job: Failed with the error, or Succeeded.

On the in-process cluster (virtual time) with the JobParser's real trainer Job,
so backoffLimit and podFailurePolicy are the ones users get.
"""

from __future__ import annotations

import asyncio

import pytest

from edl.cluster.inproc.cluster import InProcessCluster
from edl.cluster.inproc.simulated_pods import Fixed, SimulatedPodRunner
from edl.control.controller import Controller
from edl.control.job_status import replica_failure, trainer_job_outcome


class CrashingTrainers(SimulatedPodRunner):
    """Trainer pods exit 1 two seconds after they start and keep a log tail, as a
    crashing script under the local process pod runner does; other pods run on."""

    def start(self, pod, on_running, on_exit):
        if pod["metadata"]["labels"].get("edl.dev/role") == "trainer":
            self.clock.call_later(1, on_running)
            self.clock.call_later(3, on_exit, 1)
        else:
            super().start(pod, on_running, on_exit)

    def termination_message(self, name):
        return "loading data\nTraceback (most recent call last):\n" + (
            "ZeroDivisionError: division by zero"
        )


def cluster_with(clock, pod_runner) -> InProcessCluster:
    cluster = InProcessCluster(clock, pod_runner)
    cluster.add_node("n", {"cpu": "32", "memory": "64Gi"})
    return cluster


def run_until_final(clock, cluster, controller, name, limit_s=5000.0):
    async def scenario():
        task = asyncio.create_task(controller.run())
        states = []
        try:
            for _ in range(int(limit_s)):
                await asyncio.sleep(1)
                status = cluster.get_training_job("default", name).get("status") or {}
                states.append(status.get("state"))
                if status.get("state") in {"Failed", "Succeeded"}:
                    break
        finally:
            task.cancel()
        return status, states

    return clock.run(scenario())


def test_a_crashing_trainer_fails_the_training_job_with_its_error(clock, manifests):
    cluster = cluster_with(clock, CrashingTrainers(clock, start_latency=Fixed(1)))
    controller = Controller(cluster, status_interval=1.0)
    cluster.create_training_job(manifests.training_job("crash", 2, 3))

    status, states = run_until_final(clock, cluster, controller, "crash")
    assert status["state"] == "Failed"
    message = status["message"]
    assert message.startswith("the trainer Job failed: BackoffLimitExceeded")
    assert "last failed trainer crash-trainer-" in message and "(exit 1)" in message
    assert message.endswith("ZeroDivisionError: division by zero")
    assert "Running" in states  # it did run before failing
    trainer = cluster.store.peek("Job", "default", "crash-trainer")
    # the Job is left in place, Failed, with nothing running or being replaced
    assert trainer is not None
    assert cluster.trainer_counts("default", "crash").running == 0


def test_finished_trainers_make_the_training_job_succeed(clock, manifests):
    pod_runner = SimulatedPodRunner(clock, start_latency=Fixed(1), run_time={"trainer": Fixed(30)})
    cluster = cluster_with(clock, pod_runner)
    controller = Controller(cluster, status_interval=1.0)
    cluster.create_training_job(manifests.training_job("done", 2, 3))

    status, _ = run_until_final(clock, cluster, controller, "done")
    assert status["state"] == "Succeeded"
    assert status["message"] == "trainers finished"


@pytest.mark.parametrize(
    ("conditions", "last", "expected"),
    [
        ([], "", None),
        ([{"type": "Failed", "status": "False"}], "", None),
        ([{"type": "Complete", "status": "True"}], "", ("Succeeded", "trainers finished")),
        (
            [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ],
            "t-00007 (exit 1): ValueError: bad",
            (
                "Failed",
                "the trainer Job failed: BackoffLimitExceeded (Job has reached the specified "
                "backoff limit); last failed trainer t-00007 (exit 1): ValueError: bad",
            ),
        ),
        (
            [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}],
            "",
            ("Failed", "the trainer Job failed: DeadlineExceeded"),
        ),
    ],
)
def test_trainer_job_outcome(conditions, last, expected):
    assert trainer_job_outcome({"status": {"conditions": conditions}}, last) == expected


def test_a_replica_sets_refusal_is_read_in_the_api_servers_words() -> None:
    refused = {"status": {"conditions": [
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
         "message": 'pods "j-master-x" is forbidden: failed quota: q: must specify requests.cpu'}]}}
    assert replica_failure(refused).startswith('pods "j-master-x" is forbidden: failed quota')
    cleared = {"status": {"conditions": [{"type": "ReplicaFailure", "status": "False"}]}}
    assert replica_failure(cleared) == replica_failure({}) == ""


def test_a_finished_job_stays_finished_and_stops_its_master_and_pservers(clock, manifests):
    """Issue 29, item 3: the trainer Job of a Succeeded job deleted (a TTL-after-finished
    controller, a user) is not recreated by a restarted controller nor by an edit, and
    the master and pserver ReplicaSets are scaled to 0 once the job ends."""
    pod_runner = SimulatedPodRunner(clock, start_latency=Fixed(1), run_time={"trainer": Fixed(30)})
    cluster = cluster_with(clock, pod_runner)
    controller = Controller(cluster, status_interval=1.0)
    cluster.create_training_job(manifests.training_job("done", 2, 3))
    status, _ = run_until_final(clock, cluster, controller, "done")
    assert status["state"] == "Succeeded"

    async def after() -> None:
        task = asyncio.create_task(controller.run())
        await asyncio.sleep(3)  # the next refresh stops the servers
        task.cancel()
        await cluster.delete_trainer_job("default", "done-trainer")
        restarted = Controller(cluster, status_interval=1.0)  # a new process, same cluster
        task = asyncio.create_task(restarted.run())
        await asyncio.sleep(5)
        job = cluster.get_training_job("default", "done")
        job["spec"]["trainer"]["max-instance"] = 4  # an edit: a new generation
        cluster.replace_training_job(job)
        await asyncio.sleep(5)
        task.cancel()

    clock.run(after())
    assert cluster.store.peek("Job", "default", "done-trainer") is None
    assert cluster.get_training_job("default", "done")["status"]["state"] == "Succeeded"
    for role in ("master", "pserver"):
        replica_set = cluster.store.peek("ReplicaSet", "default", f"done-{role}")
        assert replica_set["spec"]["replicas"] == 0
    assert not [p for p in cluster.pod_records() if p.role in ("master", "pserver")
                and not p.terminating]
