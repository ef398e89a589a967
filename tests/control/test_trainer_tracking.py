"""The tracking finalizer on trainer pods and standing back from another writer (issue 29,
items 2 and 4), on the pure rules: which pods count, which lose the finalizer, and when
pods of another writer stop edl."""

from __future__ import annotations

from edl.control.trainer_pods import (
    KUBE_TRACKING_FINALIZER,
    TRACKING_FINALIZER,
    TrainerPodState,
    pod_state,
    trainer_pod,
)
from edl.control.trainers import FOREIGN_QUIET_S, CrashRecord, outcome, plan_trainers

SPEC = {"parallelism": 2, "backoffLimit": 6, "podFailurePolicy": {"rules": [
    {"action": "Ignore", "onExitCodes": {"containerName": "trainer", "operator": "In",
                                         "values": [143]}}]}}


def pod(name: str, phase: str = "Running", *, code: int | None = None,
        finished: float | None = None, deleted: float | None = None, ours: bool = True,
        tracked: bool = True, counted: bool = False) -> TrainerPodState:
    exits = () if code is None else (("trainer", code),)
    return TrainerPodState(name, f"uid-{name}", "n", phase, deleted is not None, False, code,
                           0.0, 1.0, finished, exits=exits, ours=ours, tracked=tracked,
                           counted=counted, deletion_asked_at=deleted)


def plan(pods: list[TrainerPodState], status: dict | None = None, now: float = 100.0):
    job = {"metadata": {"name": "demo-trainer"}, "spec": SPEC, "status": status or {}}
    return plan_trainers(job, pods, CrashRecord(), now)


def test_a_pod_deleted_after_it_failed_still_counts_one_its_deletion_ended_does_not():
    assert outcome(SPEC, pod("a", "Failed", code=1, finished=10.0, deleted=10.0)) == "failed"
    assert outcome(SPEC, pod("a", "Failed", code=1, finished=10.0, deleted=12.0)) == "failed"
    # SIGKILLed at the end of a graceful deletion: the deletion ended it
    assert outcome(SPEC, pod("a", "Failed", code=137, finished=40.0, deleted=10.0)) is None
    assert outcome(SPEC, pod("a", "Failed", code=143, finished=9.0, deleted=10.0)) is None
    # Failed without a terminated container (deleted before it ran): never a crash
    assert outcome(SPEC, pod("a", "Failed", finished=0.0, deleted=10.0)) is None
    assert outcome(SPEC, pod("a", "Succeeded", code=0, finished=9.0, deleted=10.0)) == \
        "succeeded"


def test_pod_state_reads_the_finalizer_and_when_the_deletion_was_asked():
    manifest = trainer_pod({"metadata": {"name": "j-trainer", "uid": "u"}, "spec": {}}, "p")
    assert manifest["metadata"]["finalizers"] == [TRACKING_FINALIZER]
    manifest["metadata"].update(deletionTimestamp=130.0, deletionGracePeriodSeconds=30)
    manifest["status"] = {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {
        "terminated": {"exitCode": 1, "finishedAt": 100.0}}}]}
    state = pod_state(manifest)
    assert state.tracked and state.deleting and state.deletion_asked_at == 100.0
    assert outcome(SPEC, state) == "failed"
    manifest["metadata"]["finalizers"] = ["other.example/keep"]
    assert not pod_state(manifest).tracked


def test_a_crash_deleted_at_once_enters_the_status_and_is_released_only_by_the_mark():
    crashed = pod("a", "Failed", code=1, finished=10.0, deleted=10.0)
    first = plan([crashed, pod("b")])
    assert first.ledger.uncounted_failed == ("uid-a",) and first.ledger.mark == ("a",)
    assert first.release == ()  # its finalizer goes with the counted mark, after the write
    status = {"failed": 0, "uncountedTerminatedPods": {"failed": ["uid-a"]}}
    marked = pod("a", "Failed", code=1, finished=10.0, deleted=10.0, tracked=False,
                 counted=True)
    assert plan([marked, pod("b")], status).ledger.failed == 1


def test_pods_with_nothing_to_count_lose_the_finalizer_at_once():
    drained = pod("a", "Failed", code=143, finished=10.0, deleted=9.0)
    result = plan([drained, pod("b")])
    assert result.release == ("a",) and not result.ledger.mark
    assert result.create == 1


def test_every_pod_of_a_finished_job_loses_the_finalizer():
    status = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
    pods = [pod("a", "Succeeded", code=0, finished=5.0, counted=True, tracked=False),
            pod("b", "Failed", code=143, finished=6.0, deleted=5.0), pod("c")]
    result = plan(pods, status)
    assert result.finished and set(result.release) == {"b", "c"}


def test_edl_stands_back_only_while_another_writer_is_active():
    live = pod("x", ours=False, tracked=True)
    assert plan([live, pod("a")]).foreign == ("x",)
    recent = pod("x", "Failed", code=1, finished=100.0 - FOREIGN_QUIET_S / 2, ours=False)
    assert plan([recent, pod("a")]).foreign == ("x",)
    # quiet for longer than FOREIGN_QUIET_S: edl runs the Job again
    old = pod("x", "Failed", code=1, finished=100.0 - FOREIGN_QUIET_S - 1, ours=False)
    result = plan([old, pod("a")])
    assert result.foreign == () and result.create == 1


def test_a_foreign_pod_still_holding_its_writers_finalizer_is_counted_by_edl():
    now = 1000.0
    uncounted = pod("x", "Failed", code=1, finished=10.0, ours=False, tracked=True)
    result = plan([uncounted, pod("a"), pod("b")], now=now)
    assert result.ledger.uncounted_failed == ("uid-x",) and result.ledger.mark == ("x",)
    # without it, its writer counted it (in the Job's status): not counted twice
    counted = pod("x", "Failed", code=1, finished=10.0, ours=False, tracked=False)
    result = plan([counted, pod("a"), pod("b")], {"failed": 1}, now=now)
    assert result.ledger.uncounted_failed == () and result.ledger.failed == 1
    assert result.ledger.mark == () and result.release == ()


def test_the_kube_controller_managers_finalizer_is_one_edl_removes():
    manifest = {"metadata": {"name": "x", "finalizers": [KUBE_TRACKING_FINALIZER]},
                "status": {"phase": "Failed"}}
    assert pod_state(manifest).tracked and not pod_state(manifest).ours
