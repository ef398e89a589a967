"""The batch/v1 Job contract edl's trainer controller owns for a managed trainer Job
(issue 20), on the in-process model with a lagging pod watch and the API server's
status validation: every status write below passes `jobstatus` or the test sees
the refusal in the log.

Each test names the finding it pins; each failed on the controller before it.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from edl.cluster.inproc.cluster import InProcessCluster
from edl.cluster.inproc.simulated_pods import Fixed, SimulatedPodRunner
from edl.cluster.port import ClusterError
from edl.control.controller import Controller
from edl.control.drift import unapplied
from edl.control.trainer_pods import pod_state
from edl.control.trainers import CrashRecord, job_status, plan_trainers
from edl.jobparser import JobParser

WATCH_LAG_S = 1.5  # longer than a create, a delete or a GET: the cache is always behind


def training_job(min_instance=2, max_instance=8, name="demo"):
    return {
        "apiVersion": "edl.dev/v1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "fault_tolerant": True,
            "trainer": {"entrypoint": "python train.py", "min-instance": min_instance,
                        "max-instance": max_instance,
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            "pserver": {"min-instance": 1, "max-instance": 1},
        },
    }


def plane(clock, lag=WATCH_LAG_S):
    runtime = SimulatedPodRunner(clock, start_latency=Fixed(2.0),
                                 termination={"trainer": Fixed(3.0)},
                                 other_termination=Fixed(1.0))
    cluster = InProcessCluster(clock, runtime)
    cluster.trainer_watch_lag_s = lag
    cluster.add_node("n", {"cpu": "64", "memory": "128Gi"})
    return cluster, runtime


def trainers(cluster, live=True):
    return [p for p in cluster.pod_records() if p.role == "trainer"
            and (not live or not p.terminating)]


def finish(cluster, runtime, code, count=1):
    """The first ``count`` running trainers exit with ``code``."""
    running = [p for p in trainers(cluster) if p.phase == "Running"]
    for pod in running[:count]:
        assert runtime.finish(pod.uid, code)
    return [p.name for p in running[:count]]


async def trainer_job(cluster, name="demo"):
    return await cluster.get_trainer_job_by_name("default", f"{name}-trainer")


def conditions(job):
    return {c["type"]: c for c in (job.get("status") or {}).get("conditions") or ()
            if c["status"] == "True"}


def record_writes(cluster):
    """Every stored status of the trainer Jobs, in order."""
    writes = []
    cluster.store.listen("Job", lambda event, obj, old: writes.append(
        dict(obj.get("status") or {})) if event == "MODIFIED" else None)
    return writes


def no_refused_writes(caplog):
    refused = [r.getMessage() for r in caplog.records
               if "status." in r.getMessage() or "changed since" in r.getMessage()]
    assert not refused, refused


# ------------------------------------------------------------- 1: sticky terminal state

@pytest.mark.parametrize("parallelism", [1, 4])
def test_exit_78_fails_the_job_at_once_and_no_restart_resurrects_it(clock, caplog,
                                                                    parallelism):
    cluster, runtime = plane(clock)
    created = []
    cluster.watch_pods(lambda event, p: created.append(p.name)
                       if event == "created" and p.role == "trainer" else None)

    async def scenario():
        controller = Controller(cluster, status_interval=1.0)
        await controller.on_add(cluster.create_training_job(
            training_job(parallelism, parallelism)))
        task = asyncio.get_running_loop().create_task(controller.run())
        await asyncio.sleep(10)
        finish(cluster, runtime, 78)
        await asyncio.sleep(120)
        task.cancel()
        first = await trainer_job(cluster)
        restarted = Controller(cluster, status_interval=1.0)  # edl restarts
        task = asyncio.get_running_loop().create_task(restarted.run())
        await asyncio.sleep(60)
        task.cancel()
        return first, await trainer_job(cluster), cluster.get_training_job("default", "demo")

    first, after, job = clock.run(scenario())
    assert len(created) == parallelism  # no trainer was ever recreated
    assert not trainers(cluster, live=False)
    held = conditions(first)
    assert {"FailureTarget", "Failed"} <= set(held)
    assert held["Failed"]["reason"] == "PodFailurePolicy"
    assert all("lastTransitionTime" in c for c in first["status"]["conditions"])
    assert after["status"] == first["status"]  # the restart wrote nothing, made nothing
    assert after["status"]["failed"] == 1 and after["status"]["active"] == 0
    assert job["status"]["state"] == "Failed"
    no_refused_writes(caplog)


def test_a_success_then_a_crash_completes_without_a_conflicting_condition(clock, caplog):
    cluster, runtime = plane(clock)

    async def scenario():
        controller = Controller(cluster, status_interval=1.0)
        await controller.on_add(cluster.create_training_job(training_job(3, 3)))
        task = asyncio.get_running_loop().create_task(controller.run())
        await asyncio.sleep(10)
        finish(cluster, runtime, 0)  # the work is done ...
        await asyncio.sleep(5)
        finish(cluster, runtime, 78)  # ... then one finds its config gone on the way out
        finish(cluster, runtime, 1)  # ... and one crashes
        await asyncio.sleep(60)
        task.cancel()
        return await trainer_job(cluster)

    job = clock.run(scenario())
    assert {"SuccessCriteriaMet", "Complete"} <= set(conditions(job))
    assert "FailureTarget" not in conditions(job)
    assert job["status"]["succeeded"] == 1 and "completionTime" in job["status"]
    no_refused_writes(caplog)


# ------------------------------------------------------------------ 2: expectations

def test_a_lagging_watch_never_makes_more_trainers_than_the_target(clock, caplog):
    cluster, _ = plane(clock, lag=4.0)
    over: list[tuple[float, int, int]] = []
    state = {"target": 2}

    def check(event, pod):
        live = len(trainers(cluster))
        if event == "created" and pod.role == "trainer" and live > state["target"]:
            over.append((clock.now(), live, state["target"]))

    cluster.watch_pods(check)

    async def scenario():
        controller = Controller(cluster, status_interval=1.0)
        await controller.on_add(cluster.create_training_job(training_job(2, 8)))
        task = asyncio.get_running_loop().create_task(controller.run())
        await asyncio.sleep(10)
        for target in (6, 3, 8, 2, 5, 1, 7):
            job = await trainer_job(cluster)
            live = [p.name for p in trainers(cluster)]
            job["spec"]["parallelism"] = target
            if target < state["target"]:
                await cluster.scale_trainer_job(job, live[target:])
            else:
                await cluster.update_trainer_job(job)
            state["target"] = max(target, 0)
            await asyncio.sleep(1.0)  # well inside the watch lag
            job = await trainer_job(cluster)
            await cluster.update_trainer_job(job)  # another event for the same target
            await asyncio.sleep(20)
        task.cancel()
        return await trainer_job(cluster)

    job = clock.run(scenario())
    assert over == []
    assert len(trainers(cluster)) == 7 and job["status"]["active"] == 7
    no_refused_writes(caplog)


def test_a_shrink_deletes_exactly_the_named_victims_and_creates_none(clock):
    cluster, _ = plane(clock)
    created, deleted = [], []
    cluster.watch_pods(lambda event, p: (created if event == "created" else deleted).append(
        p.name) if p.role == "trainer" and event in ("created", "deleting") else None)

    async def scenario():
        controller = Controller(cluster, status_interval=1.0)
        await controller.on_add(cluster.create_training_job(training_job(5, 8)))
        await asyncio.sleep(10)
        before = len(created)
        victims = [p.name for p in trainers(cluster)][1:4]
        job = await trainer_job(cluster)
        job["spec"]["parallelism"] = 2
        await cluster.scale_trainer_job(job, victims)
        await asyncio.sleep(30)
        return victims, before

    victims, before = clock.run(scenario())
    assert sorted(deleted) == sorted(victims)
    assert len(created) == before  # no replacement for a victim, ever


# ---------------------------------------------------------------- 3: claims by UID

def test_a_recreated_training_job_never_counts_the_old_incarnations_pods(clock, caplog):
    cluster, runtime = plane(clock)

    async def scenario():
        controller = Controller(cluster, status_interval=1.0)
        task = asyncio.get_running_loop().create_task(controller.run())
        await asyncio.sleep(0)
        cluster.create_training_job(training_job(3, 3))
        await asyncio.sleep(10)
        finish(cluster, runtime, 0)  # the old incarnation succeeded once
        finish(cluster, runtime, 1)  # and crashed once
        await asyncio.sleep(0.5)
        cluster.delete_training_job("default", "demo")
        await asyncio.sleep(0.1)
        cluster.create_training_job(training_job(3, 3))  # the same name, at once
        await asyncio.sleep(30)
        task.cancel()
        return await trainer_job(cluster)

    job = clock.run(scenario())
    assert conditions(job) == {}  # not Complete from the old success
    assert job["status"]["succeeded"] == 0 and job["status"]["failed"] == 0
    assert len(trainers(cluster)) == 3
    no_refused_writes(caplog)


def test_a_hand_labelled_pod_is_never_deleted_or_counted(clock):
    cluster, _ = plane(clock)

    async def scenario():
        controller = Controller(cluster, status_interval=1.0)
        await controller.on_add(cluster.create_training_job(training_job(2, 2)))
        await asyncio.sleep(10)
        cluster.create_pod({"metadata": {"name": "stray", "namespace": "default", "labels": {
            "edl.dev/job": "demo", "edl.dev/role": "trainer"}},
            "spec": {"containers": [{"name": "trainer", "image": "x"}]}})
        job = await trainer_job(cluster)
        job["spec"]["parallelism"] = 3
        await cluster.update_trainer_job(job)
        await asyncio.sleep(30)
        return await trainer_job(cluster)

    job = clock.run(scenario())
    assert cluster.trainer_events == []  # not taken for another controller's pod either
    stray = [p for p in trainers(cluster) if p.name == "stray"]
    assert stray and not stray[0].terminating
    assert len(trainers(cluster)) == 4 and job["status"]["active"] == 3


# ----------------------------------------------------- 4: durable, guarded counters

def test_a_crash_seen_by_no_controller_is_counted_after_a_restart_exactly_once(clock, caplog):
    cluster, runtime = plane(clock)
    writes = record_writes(cluster)

    async def scenario():
        first = Controller(cluster, status_interval=1.0)
        stop = first.watch_training_jobs()
        await asyncio.sleep(0)
        cluster.create_training_job(training_job(3, 3))
        await asyncio.sleep(10)
        stop()  # edl dies ...
        first.trainers.forget(("default", "demo"))
        crashed = finish(cluster, runtime, 1)  # ... and a trainer crashes meanwhile
        await asyncio.sleep(5)
        for _ in range(3):  # edl restarts, three times
            controller = Controller(cluster, status_interval=1.0)
            task = asyncio.get_running_loop().create_task(controller.run())
            await asyncio.sleep(40)
            task.cancel()
            await asyncio.sleep(0)
        return crashed, await trainer_job(cluster)

    crashed, job = clock.run(scenario())
    assert job["status"]["failed"] == 1
    kept = [p for p in cluster.controllers.owners[("Job", "default", "demo-trainer")]
            .finished.values()]
    assert [p.name for p in kept] == crashed  # the failed pod (and its log) is kept
    failed = [int(w.get("failed") or 0) for w in writes]
    assert failed == sorted(failed)  # never decreasing
    no_refused_writes(caplog)


def test_a_stale_status_write_is_refused_and_retried_not_lost(clock, caplog):
    cluster, runtime = plane(clock, lag=0.0)

    async def scenario():
        controller = Controller(cluster, status_interval=1.0)
        await controller.on_add(cluster.create_training_job(training_job(2, 2)))
        await asyncio.sleep(10)
        real_get = cluster.get_trainer_job_by_name
        stale = await real_get("default", "demo-trainer")

        async def once_stale(namespace, name):
            cluster.get_trainer_job_by_name = real_get
            return stale

        cluster.get_trainer_job_by_name = once_stale
        finish(cluster, runtime, 1)
        job = await real_get("default", "demo-trainer")
        other = dict(job["status"], ready=0)  # someone writes the Job's status meanwhile
        cluster.store.update_status("Job", "default", "demo-trainer", other)
        await asyncio.sleep(20)
        return await real_get("default", "demo-trainer")

    with caplog.at_level(logging.DEBUG, logger="edl.control.trainer_controller"):
        job = clock.run(scenario())
    assert job["status"]["failed"] == 1
    assert any("changed since it was read" in r.getMessage()
               for r in caplog.records)  # the stale write was refused, then re-planned


# ---------------------------------------------------------------------- 5: suspend

def test_a_suspended_trainer_job_runs_no_pod_until_resumed(clock, caplog):
    cluster, _ = plane(clock)

    async def scenario():
        controller = Controller(cluster, status_interval=1.0)
        task = asyncio.get_running_loop().create_task(controller.run())
        await controller.on_add(cluster.create_training_job(training_job(3, 3)))
        await asyncio.sleep(10)
        running = len(trainers(cluster))
        job = await trainer_job(cluster)
        job["spec"]["suspend"] = True  # as Kueue does when it preempts the workload
        cluster.store.replace("Job", job)
        await asyncio.sleep(30)
        suspended = await trainer_job(cluster), len(trainers(cluster, live=False))
        message = cluster.get_training_job("default", "demo")["status"]["message"]
        job = await trainer_job(cluster)
        job["spec"]["suspend"] = False  # admitted again
        cluster.store.replace("Job", job)
        await asyncio.sleep(30)
        task.cancel()
        return running, suspended, message, await trainer_job(cluster)

    running, (suspended, pods), message, resumed = clock.run(scenario())
    assert running == 3 and pods == 0
    assert suspended["status"]["active"] == 0 and "startTime" not in suspended["status"]
    assert conditions(suspended)["Suspended"]["reason"] == "JobSuspended"
    assert "suspended" in message
    assert len(trainers(cluster)) == 3 and resumed["status"]["active"] == 3
    (held,) = [c for c in resumed["status"]["conditions"] if c["type"] == "Suspended"]
    assert held["status"] == "False" and held["reason"] == "JobResumed"
    assert held["lastTransitionTime"] > conditions(suspended)["Suspended"]["lastTransitionTime"]
    no_refused_writes(caplog)


# ----------------------------------------------------------------- 6: another writer

def test_pods_of_another_controller_are_reported_and_edl_stands_back(clock):
    cluster, _ = plane(clock)

    async def scenario():
        controller = Controller(cluster, status_interval=1.0)
        task = asyncio.get_running_loop().create_task(controller.run())
        await controller.on_add(cluster.create_training_job(training_job(2, 2)))
        await asyncio.sleep(10)
        job = await trainer_job(cluster)
        template = job["spec"]["template"]
        cluster.create_pod({  # what a kube-controller-manager ignoring managedBy makes
            "metadata": {"name": "demo-trainer-kcm01", "namespace": "default",
                         "labels": dict(template["metadata"]["labels"]),
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": "demo-trainer", "controller": True,
                                              "uid": job["metadata"]["uid"]}]},
            "spec": template["spec"]})
        await asyncio.sleep(5)
        job = await trainer_job(cluster)
        job["spec"]["parallelism"] = 4
        await cluster.update_trainer_job(job)
        await asyncio.sleep(20)
        task.cancel()
        return cluster.get_training_job("default", "demo")

    job = clock.run(scenario())
    assert len(trainers(cluster)) == 3  # edl made no pod beside the other controller's
    assert "another controller" in job["status"]["message"]
    assert [e[2] for e in cluster.trainer_events] == ["AnotherController"]


# --------------------------------------------------------------- 7: create failures

def test_refused_pods_are_reported_in_the_api_servers_words_and_retried_in_batches(clock):
    cluster, _ = plane(clock)
    refusal = ('pods "demo-trainer-x" is forbidden: violates PodSecurity "restricted:latest": '
               'allowPrivilegeEscalation != false')
    attempts: list[float] = []
    real_create = cluster.create_trainer_pod
    state = {"refuse": True}

    async def admission(pod):
        attempts.append(clock.now())
        if state["refuse"]:
            raise ClusterError("Pod", "default", pod["metadata"]["name"], refusal, status=403)
        await real_create(pod)

    cluster.create_trainer_pod = admission

    per_pass: list[int] = []

    async def scenario():
        controller = Controller(cluster, status_interval=1.0)
        reconcile = controller.trainers.reconcile

        async def counted(key):
            before = len(attempts)
            await reconcile(key)
            per_pass.append(len(attempts) - before)

        controller.trainers.reconcile = counted
        task = asyncio.get_running_loop().create_task(controller.run())
        await controller.on_add(cluster.create_training_job(training_job(6, 6)))
        await asyncio.sleep(5)
        refused = cluster.get_training_job("default", "demo"), len(per_pass)
        state["refuse"] = False  # the namespace's policy fixed
        await asyncio.sleep(40)
        task.cancel()
        return refused, cluster.get_training_job("default", "demo")

    (refused, passes), fixed = clock.run(scenario())
    assert set(per_pass[:passes]) <= {0, 1}  # slow start: one refusal ends a pass
    tries = sum(per_pass[:passes])
    assert refusal in refused["status"]["message"]
    assert refused["status"]["state"] == "Created"
    assert [e[2:] for e in cluster.trainer_events] == [
        ("FailedCreate", f"trainer pods not created: {refusal}")]
    assert len(trainers(cluster)) == 6
    assert refusal not in fixed["status"]["message"]
    assert len(attempts) == tries + 6


# ------------------------------------------------------------------- 8: names, ready

def test_pod_names_are_never_reused_across_restarts_and_deletions(clock, caplog):
    cluster, _ = plane(clock)
    created = []
    cluster.watch_pods(lambda event, p: created.append(p.name)
                       if event == "created" and p.role == "trainer" else None)

    async def scenario():
        for cycle in range(4):  # four incarnations of edl
            controller = Controller(cluster, status_interval=1.0)
            task = asyncio.get_running_loop().create_task(controller.run())
            if cycle == 0:
                await controller.on_add(cluster.create_training_job(training_job(3, 8)))
            await asyncio.sleep(10)
            job = await trainer_job(cluster)
            victims = [p.name for p in trainers(cluster)][:2]
            job["spec"]["parallelism"] = 3 + cycle - 2
            await cluster.scale_trainer_job(job, victims)
            await asyncio.sleep(10)
            job = await trainer_job(cluster)
            job["spec"]["parallelism"] = 3 + cycle
            await cluster.update_trainer_job(job)
            await asyncio.sleep(10)
            task.cancel()
            await asyncio.sleep(0)

    clock.run(scenario())
    assert len(created) == len(set(created)) > 10
    assert not [r for r in caplog.records if "already exists" in r.getMessage()]


def ours(name):
    """A pod's metadata as edl's trainer controller creates it."""
    return {"name": name, "uid": name, "annotations": {"edl.dev/created-by": "trainer-controller"}}


def ready_pod(phase, ready, **status):
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"metadata": ours("p"),
            "status": {"phase": phase, "conditions": conditions, **status}}


def test_ready_is_the_pod_ready_condition_not_the_running_phase():
    assert not pod_state(ready_pod("Running", False)).ready  # a readiness probe failing
    assert pod_state(ready_pod("Running", True)).ready
    job = {"metadata": {"name": "demo-trainer"}, "spec": {"parallelism": 2}, "status": {}}
    pods = [pod_state(ready_pod("Running", False)),
            pod_state({**ready_pod("Running", True), "metadata": ours("q")})]
    plan = plan_trainers(job, pods, CrashRecord(), now=5.0)
    status = job_status(job, plan, 0, 0, 5.0)
    assert status["ready"] == 1 and status["active"] == 2


@pytest.mark.parametrize("status", [
    {"conditions": [{"type": "DisruptionTarget", "status": "True",
                     "reason": "PreemptionByScheduler"}]},
    {"reason": "Evicted"},  # a kubelet eviction from before the DisruptionTarget condition
    {"conditions": [{"type": "DisruptionTarget", "status": "True",
                     "reason": "TerminationByKubelet"}]},
])
def test_a_preempted_or_evicted_trainer_is_a_shrink_never_a_crash(status):
    failed = {"metadata": ours("gone"), "status": {
        "phase": "Failed", **status, "containerStatuses": [
            {"name": "trainer", "state": {"terminated": {"exitCode": 137, "finishedAt": 9.0}}}]}}
    job = {"metadata": {"name": "demo-trainer"}, "spec": {"parallelism": 2}, "status": {}}
    record = CrashRecord()
    live = pod_state({"metadata": ours("a"), "status": {"phase": "Running"}})
    plan = plan_trainers(job, [pod_state(failed), live], record, now=10.0)
    assert plan.ledger.total_failed == 0 and plan.ledger.mark == ()  # not counted
    assert plan.create == 1 and plan.retry_at is None and record.streak == 0  # no back-off


def test_the_trainer_jobs_own_pod_failure_policy_is_applied_exactly():
    spec = JobParser().parse_to_trainer(JobParser().validate(training_job()))["spec"]
    job = {"metadata": {"name": "demo-trainer"}, "spec": spec, "status": {}}

    def exited(code, name="x"):
        return pod_state({"metadata": ours(name), "status": {
            "phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {
                "terminated": {"exitCode": code, "finishedAt": 9.0}}}]}})

    sigterm = plan_trainers(job, [exited(143)], CrashRecord(), now=10.0)
    assert sigterm.ledger.total_failed == 0 and sigterm.ending is None  # Ignore rule
    crash = plan_trainers(job, [exited(1)], CrashRecord(), now=10.0)
    assert crash.ledger.total_failed == 1 and crash.ending is None  # no rule: Count
    config = plan_trainers(job, [exited(78)], CrashRecord(), now=10.0)
    assert config.ending == "Failed" and config.reason == "PodFailurePolicy"  # FailJob
    # terminating pods hold their slot (podReplacementPolicy Failed, the API default here)
    leaving = pod_state({"metadata": {**ours("t"), "deletionTimestamp": 8.0},
                         "status": {"phase": "Running"}})
    assert plan_trainers(job, [leaving], CrashRecord(), now=10.0).create == \
        int(spec["parallelism"]) - 1


# ------------------------------------------------------------ an edit via kubectl apply

def test_an_edit_the_running_pods_cannot_take_is_reported_as_not_applied(clock):
    cluster, _ = plane(clock)

    async def scenario():
        controller = Controller(cluster, status_interval=1.0)
        task = asyncio.get_running_loop().create_task(controller.run())
        await controller.on_add(cluster.create_training_job(training_job(2, 4)))
        await asyncio.sleep(10)
        edited = training_job(2, 4)
        edited["spec"]["passes"] = 7  # a new EDL_PASSES for every role
        edited["spec"]["trainer"]["workspace"] = "/data/v2"
        cluster.replace_training_job(edited)
        await asyncio.sleep(10)
        changed = cluster.get_training_job("default", "demo")
        task.cancel()
        return changed

    job = clock.run(scenario())
    message = job["status"]["message"]
    assert "spec change not applied to the trainer, master, pserver pods" in message


def test_an_edit_of_instance_counts_only_is_not_reported():
    desired = {"spec": {"template": {"spec": {"containers": [{"name": "t", "env": [
        {"name": "EDL_PASSES", "value": "1"}]}]}}}}
    stored = {"spec": {"template": {"spec": {"dnsPolicy": "ClusterFirst", "containers": [{
        "name": "t", "imagePullPolicy": "IfNotPresent",
        "env": [{"name": "EDL_PASSES", "value": "1"}]}]}}}}
    assert unapplied([("trainer", desired, stored)]) == ""  # defaults are not a change
    changed = {"spec": {"template": {"spec": {"containers": [{"name": "t", "env": [
        {"name": "EDL_PASSES", "value": "7"}]}]}}}}
    assert "trainer pods" in unapplied([("trainer", changed, stored)])


def test_kueue_labels_reach_the_trainer_job_and_a_suspended_job_is_not_scaled():
    job = training_job()
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a", "team": "x"}
    trainer = JobParser().parse_to_trainer(JobParser().validate(job))
    assert trainer["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert "team" not in trainer["metadata"]["labels"]
    assert trainer["spec"]["template"]["metadata"]["labels"] == {
        "edl.dev/job": "demo", "edl.dev/role": "trainer"}
