"""A Job's backoffLimit and podFailurePolicy in the in-process control plane, on virtual time.

The trainer Job is the JobParser's own manifest, so these tests check the pair
that matters: a crashing trainer fails its Job, while scale-downs (trainers
drained by SIGTERM exit 143) and evictions (DisruptionTarget) never do.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from edl.cluster.inproc.cluster import InProcessCluster
from edl.cluster.inproc.simulated_pods import Fixed, SimulatedPodRunner
from edl.cluster.inproc.workloads import pod_failure_action
from edl.jobparser import JobParser

TRAINER_POLICY = {
    "rules": [
        {
            "action": "Ignore",
            "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [143]},
        },
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]
}


def exited(code: int, container: str = "trainer", conditions: list | None = None) -> dict:
    """A pod status as the plane writes it when the pod's containers exit."""
    return {
        "status": {
            "phase": "Failed",
            "conditions": conditions or [],
            "containerStatuses": [{"name": container, "state": {"terminated": {"exitCode": code}}}],
        }
    }


@pytest.mark.parametrize(
    ("policy", "pod", "expected"),
    [
        (None, exited(1), ("Count", None)),
        (TRAINER_POLICY, exited(143), ("Ignore", 0)),
        (TRAINER_POLICY, exited(137), ("Count", None)),
        (TRAINER_POLICY, exited(143, container="sidecar"), ("Count", None)),  # other container
        (
            TRAINER_POLICY,
            exited(137, conditions=[{"type": "DisruptionTarget", "status": "True"}]),
            ("Ignore", 1),
        ),
        (
            TRAINER_POLICY,
            exited(137, conditions=[{"type": "DisruptionTarget", "status": "False"}]),
            ("Count", None),
        ),
        # NotIn matches a non-zero code that is not listed; rules are tried in order
        (
            {
                "rules": [
                    {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}},
                    {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}},
                ]
            },
            exited(42),
            ("FailJob", 0),
        ),
        (
            {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1]}}]},
            exited(1),
            ("Count", None),
        ),
    ],
)
def test_pod_failure_action(policy, pod, expected):
    spec = {"podFailurePolicy": policy} if policy else {}
    assert pod_failure_action(spec, pod) == expected


def trainer_job(max_instance: int = 2, min_instance: int = 2) -> dict[str, Any]:
    """The JobParser's trainer Job of a small TrainingJob `demo`, run by the Job
    controller (the design before managedBy; the pair of rules is what a cluster
    without JobManagedBy applies)."""
    job = JobParser().parse_to_trainer(
        {
            "apiVersion": "edl.dev/v1",
            "kind": "TrainingJob",
            "metadata": {"name": "demo", "namespace": "default"},
            "spec": {
                "trainer": {
                    "entrypoint": "python train.py",
                    "min-instance": min_instance,
                    "max-instance": max_instance,
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                },
                "pserver": {"min-instance": 1, "max-instance": 1},
            },
        }
    )
    del job["spec"]["managedBy"]
    return job


class Scripted(SimulatedPodRunner):
    """Simulated pods whose exits a test scripts.

    ``crash_after`` (s): a running pod exits ``crash_code`` by itself; ``stop_code``:
    the code a deleted pod exits with (143 = drained by SIGTERM, 137 = SIGKILLed).
    Failed pods get a termination message, as the local process pod runner keeps one.
    """

    def __init__(self, clock, crash_after=None, crash_code=1, stop_code=143):
        super().__init__(clock, start_latency=Fixed(1), termination={"trainer": Fixed(1)})
        self.crash_after, self.crash_code, self.stop_code = crash_after, crash_code, stop_code
        self.on_exits: dict[str, Any] = {}

    def start(self, pod, on_running, on_exit):
        name = pod["metadata"]["name"]
        self.on_exits[name] = on_exit
        if self.crash_after is not None:
            self.clock.call_later(1, on_running)
            self.clock.call_later(1 + self.crash_after, self._exit_once, name, self.crash_code)
        else:
            super().start(pod, on_running, lambda code: self._exit_once(name, code))

    def stop(self, pod, grace_period_s):
        name = pod["metadata"]["name"]
        self.clock.call_later(1, self._exit_once, name, self.stop_code)

    def _exit_once(self, name, code):
        on_exit = self.on_exits.pop(name, None)
        if on_exit is not None:
            on_exit(code if code != 143 else self.stop_code)

    def termination_message(self, name: str) -> str:
        return f"Traceback ...\nZeroDivisionError: division by zero in {name}"


def cluster_with(runtime_factory) -> tuple[InProcessCluster, Any]:
    def build(clock):
        pod_runner = runtime_factory(clock)
        cluster = InProcessCluster(clock, pod_runner)
        cluster.add_node("n", {"cpu": "32", "memory": "64Gi"})
        return cluster, pod_runner

    return build


def test_a_crashing_trainer_fails_its_job_after_the_backoff_limit(clock):
    cluster, _ = cluster_with(lambda c: Scripted(c, crash_after=2.0))(clock)
    manifest = trainer_job(max_instance=2)
    limit = manifest["spec"]["backoffLimit"]
    created = []
    cluster.watch_pods(lambda event, pod: created.append(pod.name) if event == "created" else None)

    async def scenario():
        await cluster.create_job(manifest)
        for _ in range(2000):
            await asyncio.sleep(5)
            job = await cluster.get_trainer_job_by_name("default", "demo-trainer")
            if job["status"].get("conditions"):
                break
        await asyncio.sleep(10)  # the Job's last pods are deleted
        return job, await cluster.last_trainer_failure({"metadata": {"name": "demo"}})

    job, last = clock.run(scenario())
    (condition,) = job["status"]["conditions"]
    assert condition["type"] == "Failed" and condition["status"] == "True"
    assert condition["reason"] == "BackoffLimitExceeded"
    # both trainers crash in step, so the one that fails beside the last straw counts too
    assert limit + 1 <= job["status"]["failed"] <= limit + 2
    assert "ZeroDivisionError" in last and last.startswith("demo-trainer-")
    assert list(cluster.pod_records()) == []  # no pod left, none replaced any more
    assert len(created) == job["status"]["failed"]  # each failure replaced until the limit


def test_scale_downs_and_evictions_never_fail_the_trainer_job(clock):
    # deleted pods exit 143 (drained) unless evicted: those are SIGKILLed (137)
    cluster, pod_runner = cluster_with(lambda c: Scripted(c))(clock)
    manifest = trainer_job(max_instance=2)
    limit = manifest["spec"]["backoffLimit"]

    async def scenario():
        await cluster.create_job(manifest)
        async def both_running():  # scale-ups wait out the Job's growing back-off record
            while sum(p.phase == "Running" for p in cluster.pod_records()) < 2:
                await asyncio.sleep(5)

        for _ in range(limit + 3):
            await both_running()
            cluster.scale("Job", "default", "demo-trainer", 1)
            await asyncio.sleep(5)
            cluster.scale("Job", "default", "demo-trainer", 2)
            await both_running()
            pod_runner.stop_code = 137
            (victim, *_) = [p.name for p in cluster.pod_records() if p.phase == "Running"]
            cluster.evict_pod("default", victim)
            await asyncio.sleep(5)
            pod_runner.stop_code = 143
        await both_running()
        return await cluster.get_trainer_job_by_name("default", "demo-trainer")

    job = clock.run(scenario())
    assert job["status"]["failed"] == 0
    assert "conditions" not in job["status"]
    assert job["status"]["active"] == 2


def test_deleted_pods_count_when_no_rule_ignores_them(clock, manifests):
    # as Kubernetes counts a deleted Job pod that ends Failed: a SIGKILLed trainer (137)
    # and, for a Job without podFailurePolicy, a drained one too
    cluster, pod_runner = cluster_with(lambda c: Scripted(c, stop_code=137))(clock)
    plain = manifests.batch_job("plain-trainer", 2, "1")

    async def scenario():
        await cluster.create_job(trainer_job())
        await cluster.create_job(plain)
        await asyncio.sleep(5)
        victim = next(p.name for p in cluster.pod_records() if p.name.startswith("demo-"))
        cluster.delete_pod("default", victim)  # a plain delete: no DisruptionTarget
        pod_runner.stop_code = 143
        cluster.scale("Job", "default", "plain-trainer", 1)
        await asyncio.sleep(15)  # past the 10 s back-off before a counted failure's replacement
        return (
            await cluster.get_trainer_job_by_name("default", "demo-trainer"),
            await cluster.get_trainer_job_by_name("default", "plain-trainer"),
        )

    demo, plain_job = clock.run(scenario())
    assert demo["status"]["failed"] == 1 and demo["status"]["active"] == 2
    assert plain_job["status"]["failed"] == 1 and plain_job["status"]["active"] == 1


def test_a_fail_job_rule_fails_the_job_at_the_first_matching_failure(clock):
    cluster, _ = cluster_with(lambda c: Scripted(c, crash_after=2.0, crash_code=42))(clock)
    manifest = trainer_job()
    manifest["spec"]["podFailurePolicy"]["rules"].insert(
        0, {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}
    )

    async def scenario():
        await cluster.create_job(manifest)
        await asyncio.sleep(30)
        return await cluster.get_trainer_job_by_name("default", "demo-trainer")

    job = clock.run(scenario())
    (condition,) = job["status"]["conditions"]
    assert (condition["type"], condition["reason"]) == ("Failed", "PodFailurePolicy")
    assert "exit code 42" in condition["message"] and "rule at index 0" in condition["message"]
    assert job["status"]["failed"] == 1  # the other trainer was deleted, not counted
    assert job["status"]["active"] == 0
