"""Property tests of the trainer controller's pure rules against the API server's
status validation (`edl.cluster.inproc.jobstatus`, upstream `validateJobStatus` /
`ValidateJobStatusUpdate`): whatever the pods do, in any order, every status the
rules write is one the API server accepts over the previous one, the counters never
decrease, a finished Job stays finished with no pod created, and each finished pod
is counted exactly once.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from edl.cluster.inproc.jobstatus import job_status_errors
from edl.control.trainer_pods import TrainerPodState
from edl.control.trainers import CrashRecord, is_finished, job_status, plan_trainers
from edl.jobparser import JobParser

SPEC = JobParser().parse_to_trainer(JobParser().validate({
    "apiVersion": "edl.dev/v1", "kind": "TrainingJob",
    "metadata": {"name": "demo", "namespace": "default"},
    "spec": {"trainer": {"entrypoint": "python train.py", "min-instance": 3,
                         "max-instance": 3,
                         "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
             "pserver": {"min-instance": 1, "max-instance": 1}},
}))["spec"] | {"managedBy": "edl.dev/trainer-controller"}

EVENTS = st.lists(st.tuples(
    st.sampled_from(["exit", "delete", "vanish", "restart", "suspend", "resume", "start"]),
    st.integers(0, 20), st.sampled_from([0, 1, 1, 137, 143, 78])), max_size=60)


def new_pod(n: int, now: float) -> TrainerPodState:
    return TrainerPodState(f"p{n}", f"u{n}", "node", "Pending", False, False, None, now,
                           None, None)


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_every_status_written_is_valid_and_counts_each_pod_once(events):
    job = {"metadata": {"name": "demo-trainer", "uid": "job"}, "spec": dict(SPEC),
           "status": {}}
    pods: dict[str, TrainerPodState] = {}
    record, made, now = CrashRecord(), 0, 0.0
    counted_outcomes: dict[str, str] = {}
    for kind, pick, code in events:
        now += 1.0
        names = sorted(pods)
        target = pods.get(names[pick % len(names)]) if names else None
        if kind == "exit" and target is not None and not target.finished:
            phase = "Succeeded" if code == 0 else "Failed"
            pods[target.name] = replace(target, phase=phase, exit_code=code, finished_at=now,
                                        exits=(("trainer", code),))
        elif kind == "delete" and target is not None and not target.finished:
            pods[target.name] = replace(target, deleting=True)
        elif kind == "vanish" and target is not None and (target.finished or target.deleting):
            del pods[target.name]  # a deleted pod's removal, or garbage collection
        elif kind == "start" and target is not None and target.phase == "Pending":
            pods[target.name] = replace(target, phase="Running", started_at=now, ready=True)
        elif kind == "restart":
            record = CrashRecord()  # edl restarts: memory lost, the Job's status kept
        elif kind in ("suspend", "resume"):
            job["spec"]["suspend"] = kind == "suspend"
        was_finished = is_finished(job["status"])
        plan = plan_trainers(job, list(pods.values()), record, now)
        if was_finished:
            assert plan.create == 0 and plan.finished
            continue
        held = {c["type"] for c in job["status"].get("conditions") or ()
                if c["status"] == "True"}
        if held & {"FailureTarget", "SuccessCriteriaMet"}:
            assert plan.create == 0  # the end is decided: sticky, whatever the pods do
        for name in plan.delete:
            pods[name] = replace(pods[name], deleting=True)
        for _ in range(plan.create):
            made += 1
            pods[f"p{made}"] = new_pod(made, now)
        status = job_status(job, plan, plan.create, len(plan.delete), now)
        merged = {k: v for k, v in {**job["status"], **status}.items() if v is not None}
        assert job_status_errors(job["spec"], job["status"], merged) == []
        job["status"] = merged
        for name in plan.ledger.mark:  # the mark lands after the write
            pods[name] = replace(pods[name], counted=True)
            counted_outcomes.setdefault(pods[name].uid, pods[name].phase)
    status = job["status"]
    uncounted = status.get("uncountedTerminatedPods") or {}
    failed_marked = sum(1 for phase in counted_outcomes.values() if phase == "Failed")
    succeeded_marked = sum(1 for phase in counted_outcomes.values() if phase == "Succeeded")
    # every marked pod is in a counter or still listed as uncounted, never in both
    assert status.get("failed", 0) + len(uncounted.get("failed") or ()) == failed_marked
    assert status.get("succeeded", 0) + len(uncounted.get("succeeded") or ()) == \
        succeeded_marked
