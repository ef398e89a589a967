"""What a TrainingJob's status says of its trainers (pure): the states, why missing
trainers wait, and the outcome once the trainer Job has ended."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edl.cluster.port import JobPods

CREATED = "Created"
RUNNING = "Running"
FAILED = "Failed"
SUCCEEDED = "Succeeded"
# the message while Kueue (or anyone) holds the trainer Job suspended: condition Suspended
SUSPENDED_MESSAGE = "trainer Job suspended"
# A trainer's error that only tells of another's failure (its peer went away, torch closed
# the rendezvous): the job's status names the failure that caused it, not this one.
SECONDARY_FAILURES = ("RendezvousClosedError", "Connection closed by peer",
                      "Connection reset by peer", "DistNetworkError", "DistBackendError",
                      "Broken pipe")
TRAINER_JOB_FAILED = "the trainer Job failed"  # how a finished job's Failed message starts
STALLED = "stalled"  # how the message of a job its stall limit ended starts (`job_health`)


def _trainers(count: int) -> str:
    return f"{count} trainer{'' if count == 1 else 's'}"


def waiting_reason(desired: int, pods: JobPods) -> str:
    """What a job's missing trainers wait for, in a few words (pure); "" when none is missing.

    Shown as `status.waiting` (the WAITING column of `kubectl get tj`): a trainer not yet
    bound to a node waits for room the scheduler can use; a bound one is starting; one the
    Job has not created yet waits for the trainer controller.
    """
    if pods.running >= desired:
        return ""
    unscheduled = pods.unscheduled if pods.unscheduled is not None else 0
    starting = pods.pending - unscheduled
    parts = []
    if unscheduled:
        parts.append(f"{_trainers(unscheduled)} unscheduled (no node fits yet)")
    if pods.unscheduled is None and pods.pending:
        parts.append(f"{_trainers(pods.pending)} pending")
    elif starting > 0:
        parts.append(f"{_trainers(starting)} starting")
    missing = desired - pods.running - pods.pending
    if missing > 0:
        parts.append(f"{_trainers(missing)} not created yet")
    return "; ".join(parts)


def replica_failure(replica_set: Mapping[str, Any]) -> str:
    """The ReplicaSet controller's last refusal to create its pods, in the API server's
    words (its ``ReplicaFailure`` condition, e.g. ``pods "x-master-7b2" is forbidden:
    failed quota: ...``); "" when it has none."""
    for condition in (replica_set.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "ReplicaFailure" and condition.get("status") == "True":
            return str(condition.get("message") or condition.get("reason") or "FailedCreate")
    return ""


def trainer_job_outcome(
    trainer: Mapping[str, Any], last_failure: str = ""
) -> tuple[str, str] | None:
    """(state, message) once the trainer Job has ended, else None (pure).

    A Job condition ``Failed`` (e.g. reason ``BackoffLimitExceeded``: its
    trainers crashed more often than its backoffLimit allows) fails the
    TrainingJob; the message names the reason and, if the cluster knows it, the
    last failed trainer pod and its error. ``Complete`` means the trainers
    finished the work.
    """
    status = trainer.get("status") or {}
    conditions = {
        c.get("type"): c for c in status.get("conditions") or () if c.get("status") == "True"
    }
    if "Failed" in conditions:
        condition = conditions["Failed"]
        reason = condition.get("reason") or "unknown reason"
        detail = condition.get("message")
        message = f"{TRAINER_JOB_FAILED}: {reason}" + (f" ({detail})" if detail else "")
        if last_failure:
            message += f"; last failed trainer {last_failure}"
        return FAILED, message
    if "Complete" in conditions:
        return SUCCEEDED, "trainers finished"
    return None


def finished_state(status: Mapping[str, Any]) -> str | None:
    """``Succeeded`` or ``Failed`` once the job's trainers have ended, from its stored
    status; None otherwise. A job Failed for its spec or its children is not finished
    (an edit or the cause's repair starts it); one whose trainer Job failed, or that
    its stall limit ended, is."""
    state = status.get("state")
    if state == SUCCEEDED:
        return SUCCEEDED
    if state == FAILED and str(status.get("message") or "").startswith(
            (TRAINER_JOB_FAILED, STALLED)):
        return FAILED
    return None


def plan_status(autoscaler: object, key: tuple[str, str]) -> dict[str, Any] | None:
    """The Autoscaler's last decision for the job, for `status.plan`: its target and
    why (what bounds the job: a quota, the nodes it may use, its fair share). Only the
    reason's first part (before " | "), which changes when the decision does, so
    status is not rewritten for a changing figure."""
    decision_for = getattr(autoscaler, "decision_for", None)
    decision = decision_for(key) if callable(decision_for) else None
    if decision is None:
        return None
    return {"target": decision.target, "reason": decision.reason.split(" | ")[0]}


def is_secondary_failure(line: str) -> bool:
    """Whether a failed trainer's last line only reports another trainer's failure."""
    return any(sign in line for sign in SECONDARY_FAILURES)


def keeps_cause(previous: str, line: str) -> bool:
    """Whether the failure already named (``previous``) stays the one to show when
    ``line`` comes after it: a peer's side of a failure never hides its cause."""
    return bool(previous) and is_secondary_failure(line) and not is_secondary_failure(previous)
