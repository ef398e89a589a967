"""TrainingJob status for Kubernetes: conditions, observedGeneration, scale replicas (pure).

The Controller decides a job's state and message; Kubernetes users and tools
expect more: `observedGeneration` (has the controller seen my edit?),
`conditions` (Ready / Scaling / Complete / Failed / Suspended with reasons, so
`kubectl wait --for=condition=Complete` works) and `status.replicas` for the
scale subresource. This module derives those from the Controller's status and
the previous one, keeping `lastTransitionTime` when a condition's status does
not change.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from edl.control.job_status import STALLED, SUSPENDED_MESSAGE

STATUS_KEYS = ("state", "message", "waiting", "trainers", "replicas", "observedGeneration",
               "conditions")


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def failure_reason(message: str) -> str:
    """Why a job failed, from the Controller's message (it has one message per cause)."""
    if message.startswith("creating children"):
        return "ChildrenNotCreated"
    if message.startswith("the trainer Job failed"):
        return "TrainerJobFailed"
    if message.startswith(STALLED):
        return "Stalled"
    return "InvalidSpec"


def _condition(kind: str, true: bool, reason: str, message: str, generation: int | None,
               previous: Mapping[str, Mapping[str, Any]], now: str) -> dict[str, Any]:
    status = "True" if true else "False"
    before = previous.get(kind) or {}
    since = before.get("lastTransitionTime") if before.get("status") == status else None
    condition: dict[str, Any] = {
        "type": kind, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": since or now,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def kube_status(
    status: Mapping[str, Any],
    previous: Mapping[str, Any] | None,
    generation: int | None,
    now: str | None = None,
) -> dict[str, Any]:
    """The full status to store: the Controller's fields plus Kubernetes bookkeeping."""
    now = now or now_rfc3339()
    state = status.get("state") or "Created"
    message = status.get("message") or ""
    trainers = status.get("trainers") or None
    # `previous` is what the API server stored, which a user (or an old version) may have
    # written in any shape: read only the conditions that look like conditions.
    stored = previous.get("conditions") if isinstance(previous, Mapping) else None
    old_conditions: dict[str, Mapping[str, Any]] = {
        str(c.get("type")): c for c in (stored if isinstance(stored, list) else ())
        if isinstance(c, Mapping)
    }
    failed = state == "Failed"
    out: dict[str, Any] = {"state": state, "message": message}
    waiting = status.get("waiting")
    if message.startswith("creating children, retrying"):
        waiting = "its children to be created (retrying, see message)"
    if waiting and not failed:
        out["waiting"] = str(waiting)
    if trainers is not None:
        out["trainers"] = dict(trainers)
        out["replicas"] = int(trainers.get("desired", 0))
    plan = status.get("plan")
    if isinstance(plan, Mapping):
        out["plan"] = dict(plan)
    if generation is not None:
        out["observedGeneration"] = generation
    desired = int((trainers or {}).get("desired", 0))
    running = int((trainers or {}).get("running", 0))
    ready = state in {"Running", "Succeeded"} and not failed
    if failed:
        scaling = (False, "Failed", "the job failed")
    elif trainers is None:
        scaling = (False, "Unknown", "no trainer counts yet")
    elif running < desired:
        scaling = (True, "ScalingUp", f"{running} of {desired} trainers running")
    elif running > desired:
        scaling = (True, "ScalingDown", f"{running} trainers running, {desired} desired")
    else:
        scaling = (False, "Stable", f"{running} trainers running as desired")
    complete = state == "Succeeded"
    suspended = not (failed or complete) and message.startswith(SUSPENDED_MESSAGE)
    out["conditions"] = [
        _condition("Ready", ready, state if ready else "NotRunning", message, generation,
                   old_conditions, now),
        _condition("Scaling", scaling[0], scaling[1], scaling[2], generation, old_conditions, now),
        _condition("Complete", complete, "TrainersFinished" if complete else "NotFinished",
                   message if complete else "", generation, old_conditions, now),
        _condition("Failed", failed, failure_reason(message) if failed else "NoFailure",
                   message if failed else "", generation, old_conditions, now),
        _condition("Suspended", suspended, "TrainerJobSuspended" if suspended else "NotSuspended",
                   message if suspended else "", generation, old_conditions, now),
    ]
    health = status.get("health")
    if isinstance(health, Mapping):  # what the job's processes say (edl.control.job_health)
        failing, stall = str(health.get("checkpoint") or ""), str(health.get("stall") or "")
        out["conditions"] += [
            _condition("CheckpointFailing", bool(failing),
                       "CheckpointFailing" if failing else "CheckpointsSaved", failing,
                       generation, old_conditions, now),
            _condition("Stalled", bool(stall), "NoProgress" if stall else "Progressing", stall,
                       generation, old_conditions, now),
        ]
    return out


# A health condition's change -> the Event that says it: (type, reason, Warning?).
HEALTH_EVENTS = {
    ("CheckpointFailing", "True"): ("CheckpointFailing", True),
    ("CheckpointFailing", "False"): ("CheckpointRecovered", False),
    ("Stalled", "True"): ("Stalled", True),
    ("Stalled", "False"): ("ProgressResumed", False),
}


def health_changes(
    previous: Mapping[str, Any], new: Mapping[str, Any],
) -> list[tuple[str, str, bool]]:
    """(Event reason, message, is a Warning) for each health condition that changed (pure).

    A condition first seen False says nothing; one that turns True (or True with a new
    message) is a Warning; one that turns False again is a Normal Event."""
    def conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
        listed = status.get("conditions")
        return {str(c.get("type")): c for c in (listed if isinstance(listed, list) else ())
                if isinstance(c, Mapping)}

    before, after = conditions(previous), conditions(new)
    changes = []
    for kind in ("CheckpointFailing", "Stalled"):
        now, then = after.get(kind), before.get(kind) or {}
        if now is None:
            continue
        status, message = now.get("status"), str(now.get("message") or "")
        if status == "True" and (then.get("status") != "True" or then.get("message") != message):
            reason, warning = HEALTH_EVENTS[(kind, "True")]
            changes.append((reason, message, warning))
        elif status == "False" and then.get("status") == "True":
            reason, warning = HEALTH_EVENTS[(kind, "False")]
            what = "checkpoints are saved again" if kind == "CheckpointFailing" else (
                "progress moves again")
            changes.append((reason, f"{what} (was: {then.get('message')})", warning))
    return changes


def status_patch(new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch that *replaces* status: keys we own but did not set become null."""
    patch: dict[str, Any] = {key: None for key in STATUS_KEYS}
    patch.update(new)
    return {"status": patch}
