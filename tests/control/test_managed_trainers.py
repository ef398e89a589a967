"""Trainer pods run by edl's controller (a trainer Job with spec.managedBy).

The rules (`edl.control.trainers`) on plain data, then the Controller on the
faithful in-process model: scale-ups right after shrinks stay immediate cycle
after cycle (the old design's growing delay is pinned in tests/cluster/test_fidelity.py),
while crash replacements still wait longer and longer and a crash loop fails the job.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace

import pytest

from edl.cluster.inproc.cluster import InProcessCluster
from edl.cluster.inproc.simulated_pods import Fixed, SimulatedPodRunner
from edl.control.controller import Controller
from edl.control.trainer_pods import TrainerPodState
from edl.control.trainers import CrashRecord, crash_delay_s, plan_trainers


def pod(name, phase="Running", node="n", deleting=False, disrupted=False, code=None,
        created=0.0, started=1.0, finished=None) -> TrainerPodState:
    exits = () if code is None else (("trainer", code),)
    return TrainerPodState(name, name, node, phase, deleting, disrupted, code, created,
                           started, finished, exits=exits)


def plan_for(spec, pods, record, now, status=None):
    """The rules for a trainer Job with this spec and status."""
    job = {"metadata": {"name": "demo-trainer"}, "spec": spec, "status": status or {}}
    return plan_trainers(job, pods, record, now)


def test_drained_and_evicted_trainers_are_replaced_at_once_and_never_counted():
    record = CrashRecord()
    pods = [
        pod("a"), pod("b", "Failed", deleting=True, code=143, finished=5.0),
        pod("c", "Failed", disrupted=True, code=137, finished=5.0),
        pod("d", "Failed", deleting=True, code=137, finished=6.0),  # SIGKILLed after grace
        pod("e", "Failed", deleting=True, code=None, started=None, finished=6.0),  # never ran
    ]
    plan = plan_for({"parallelism": 5, "backoffLimit": 0}, pods, record, now=7.0)
    assert plan.create == 4 and plan.retry_at is None and plan.ending is None
    assert plan.ledger.total_failed == 0 and plan.ledger.mark == ()  # none of them counts


def test_a_crash_replacement_waits_but_a_scale_up_beside_it_does_not():
    record = CrashRecord()
    crashed = pod("a", "Failed", code=1, finished=10.0)
    plan = plan_for({"parallelism": 3}, [crashed, pod("b")], record, now=10.0)
    assert plan.create == 1 and plan.retry_at == 20.0  # the scale-up now, the crash later
    assert plan.ledger.total_failed == 1 and record.owed == 1
    plan = plan_for({"parallelism": 3}, [pod("b"), pod("x")], record, now=20.0)
    assert plan.create == 1 and record.owed == 0


@pytest.mark.parametrize("streak", [1, 2, 3, 7, 30])
def test_crash_delay_doubles_from_ten_seconds_to_ten_minutes(streak):
    assert crash_delay_s(streak) == min(10 * 2 ** (streak - 1), 600)


def test_a_long_run_starts_a_new_streak_and_a_scale_down_forgives_owed_replacements():
    record = CrashRecord(streak=5)
    plan_for({"parallelism": 2}, [pod("a", "Failed", code=1, started=0.0, finished=700.0),
                                       pod("b")], record, now=700.0)
    assert record.streak == 1
    plan = plan_for({"parallelism": 1}, [pod("b")], record, now=701.0)
    assert plan.create == 0 and record.owed == 0


def test_a_peer_s_rendezvous_closed_error_never_replaces_the_script_s_line():
    """Rank 0's script raises; rank 1's agent then fails with torch's
    RendezvousClosedError: the job names rank 0's line (the real node's case)."""
    record = CrashRecord()
    cause = replace(pod("r0", "Failed", code=1, finished=5.0),
                    message="failed (status 1): ValueError: bad learning rate: -1")
    peer = replace(pod("r1", "Failed", code=1, finished=9.0),
                   message="failed under torchrun (status 1): RendezvousClosedError")
    plan_for({"parallelism": 2}, [cause, peer], record, now=10.0)
    assert record.last_failure.endswith("ValueError: bad learning rate: -1")
    again = replace(pod("r2", "Failed", code=1, finished=20.0),
                    message="failed (status 1): ValueError: bad learning rate: -2")
    plan_for({"parallelism": 2}, [cause, peer, again], record, now=21.0)
    assert record.last_failure.endswith("bad learning rate: -2")  # a newer cause wins
    alone = CrashRecord()
    plan_for({"parallelism": 2}, [peer], alone, now=10.0)
    assert alone.last_failure.endswith("RendezvousClosedError")  # all there is


def test_crashes_past_the_backoff_limit_fail_the_job_and_delete_the_rest():
    record = CrashRecord()
    pods = [pod(f"c{i}", "Failed", code=1, finished=float(i)) for i in range(3)] + [pod("live")]
    plan = plan_for({"parallelism": 4, "backoffLimit": 2}, pods, record, now=5.0)
    assert plan.ending == "Failed" and plan.reason == "BackoffLimitExceeded"
    assert plan.delete == ("live",) and plan.create == 0


def test_a_success_completes_once_the_others_are_gone():
    record = CrashRecord()
    plan = plan_for({"parallelism": 3}, [pod("a", "Succeeded", code=0, finished=9.0),
                                              pod("b")], record, now=9.0)
    assert plan.create == 0 and plan.ending == "Complete" and plan.delete == ()
    plan = plan_for({"parallelism": 3}, [], record, now=12.0,
                    status={"uncountedTerminatedPods": {"succeeded": ["a"]}})
    assert plan.ending == "Complete" and plan.ledger.succeeded == 1


def test_excess_trainers_go_unscheduled_then_pending_then_newest():
    pods = [pod("old", created=1), pod("new", created=5), pod("starting", "Pending", created=0),
            pod("unbound", "Pending", node=None, created=0)]
    plan = plan_for({"parallelism": 1}, pods, CrashRecord(), now=10.0)
    assert plan.delete == ("unbound", "starting", "new")


# --------------------------------------------------------------------------- on the model


def training_job(min_instance=2, max_instance=8):
    return {
        "apiVersion": "edl.dev/v1", "kind": "TrainingJob",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {
            "fault_tolerant": True,
            "trainer": {"entrypoint": "python train.py", "min-instance": min_instance,
                        "max-instance": max_instance,
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            "pserver": {"min-instance": 1, "max-instance": 1},
        },
    }


def plane(clock, runtime=None):
    runtime = runtime or SimulatedPodRunner(
        clock, start_latency=Fixed(2.0), termination={"trainer": Fixed(3.0)},
        other_termination=Fixed(1.0))
    cluster = InProcessCluster(clock, runtime)
    cluster.add_node("n", {"cpu": "32", "memory": "64Gi"})
    return cluster


def test_scale_ups_after_any_number_of_shrinks_are_immediate(clock):
    """The acceptance pair of test_drained_trainers_delay_every_later_scale_up_more_cycle_by_cycle:
    the same cycles, with the Controller running the trainer pods."""
    cluster = plane(clock)
    controller = Controller(cluster)
    created: list[float] = []
    cluster.watch_pods(lambda event, p: created.append(p.created_at)
                       if event == "created" and p.role == "trainer" else None)
    delays = []

    async def cycles():
        await controller.on_add(cluster.create_training_job(training_job()))
        await asyncio.sleep(20)
        for _ in range(12):
            job = await cluster.get_trainer_job_by_name("default", "demo-trainer")
            victim = next(p.name for p in cluster.pod_records()
                          if p.role == "trainer" and p.phase == "Running")
            job["spec"]["parallelism"] = 1
            await cluster.scale_trainer_job(job, [victim])
            await asyncio.sleep(10)
            before, up = len(created), clock.now()
            job = await cluster.get_trainer_job_by_name("default", "demo-trainer")
            job["spec"]["parallelism"] = 2
            await cluster.update_trainer_job(job)
            while len(created) == before:
                await asyncio.sleep(0.1)
            delays.append(created[-1] - up)
            await asyncio.sleep(5)
        return await cluster.get_trainer_job_by_name("default", "demo-trainer")

    job = clock.run(cycles())
    assert delays == [0.0] * 12  # created in the reconcile that saw the new parallelism
    assert job["status"]["failed"] == 0 and "conditions" not in job["status"]


class Crashing(SimulatedPodRunner):
    """Trainers crash (exit 1) 5 s after they start."""

    def _running(self, uid, role):
        super()._running(uid, role)
        sim = self._pods.get(uid)
        if sim is not None:
            sim.timer = self.clock.call_later(5.0, self._exit, uid, 1)

    def termination_message(self, name):
        return f"Traceback ...\nValueError: bad batch in {name}"


def test_a_crash_loop_waits_longer_each_time_then_fails_the_training_job(clock):
    runtime = Crashing(clock, start_latency=Fixed(1.0), termination={"trainer": Fixed(1.0)})
    cluster = plane(clock, runtime)
    controller = Controller(cluster, status_interval=1.0)
    created: list[float] = []
    cluster.watch_pods(lambda event, p: created.append(p.created_at)
                       if event == "created" and p.role == "trainer" else None)

    async def scenario():
        await controller.on_add(cluster.create_training_job(training_job(1, 1)))
        task = asyncio.get_running_loop().create_task(controller.run())
        await asyncio.sleep(3000)
        task.cancel()
        return cluster.get_training_job("default", "demo")

    job = clock.run(scenario())
    gaps = [b - a for a, b in itertools.pairwise(created)]
    # each crash comes 6 s after its pod's creation; the replacement waits 10, 20, 40 ... s
    assert gaps[:4] == pytest.approx([16.0, 26.0, 46.0, 86.0])
    limit = 6  # trainer_backoff_limit(1)
    assert len(created) == limit + 1
    assert job["status"]["state"] == "Failed"
    assert "BackoffLimitExceeded" in job["status"]["message"]
    assert "ValueError: bad batch" in job["status"]["message"]


def test_a_fail_job_rule_fails_at_the_first_matching_crash():
    spec = {"parallelism": 2, "podFailurePolicy": {"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "trainer", "operator": "In",
                                              "values": [78]}}]}}
    plan = plan_for(spec, [pod("a", "Failed", code=78, finished=3.0), pod("b")],
                         CrashRecord(), now=3.0)
    assert plan.ending == "Failed" and plan.reason == "PodFailurePolicy"
    assert plan.delete == ("b",)
    drained = plan_for(spec, [pod("a", "Failed", deleting=True, code=78, finished=3.0)],
                            CrashRecord(), now=3.0)
    assert drained.ending is None  # only a crash (not a deleted pod) fails the job
