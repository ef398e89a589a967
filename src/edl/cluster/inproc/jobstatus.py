"""The API server's validation of a Job status update, for Jobs another controller
manages (upstream `pkg/apis/batch/validation/validation.go`: ``validateJobStatus``
and ``ValidateJobStatusUpdate``, with the options `pkg/registry/batch/job/strategy.go`
turns on for a Job whose ``spec.managedBy`` is not the built-in controller's).

Pure: old and new status in, the refusals in the API server's words out. The
in-process cluster applies it to every status write of a managed Job, so a
controller that writes what a real API server would refuse fails in simulation.
Not modelled: indexed-Job fields (edl's trainer Job is not indexed) and the
``SuccessPolicy`` rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _true(status: Mapping[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in status.get("conditions") or ())


def _finished(status: Mapping[str, Any]) -> bool:
    return _true(status, "Complete") or _true(status, "Failed")


def job_status_errors(spec: Mapping[str, Any], old: Mapping[str, Any],
                      new: Mapping[str, Any]) -> list[str]:
    """Why the API server would refuse replacing status ``old`` by ``new``; [] if not."""
    errors = []
    for name in ("active", "succeeded", "failed", "ready", "terminating"):
        if int(new.get(name) or 0) < 0:
            errors.append(f"status.{name}: must be greater than or equal to 0")
    uncounted = new.get("uncountedTerminatedPods") or {}
    uids = [*(uncounted.get("succeeded") or ()), *(uncounted.get("failed") or ())]
    if len(uids) != len(set(uids)):
        errors.append("status.uncountedTerminatedPods: Duplicate value")
    complete, failed = _true(new, "Complete"), _true(new, "Failed")
    finished = complete or failed
    if complete and failed:
        errors.append("status.conditions: cannot set Complete=True and Failed=true conditions")
    if complete and _true(new, "FailureTarget"):
        errors.append("status.conditions: cannot set Complete=True and FailureTarget=true "
                      "conditions")
    if new.get("completionTime") is not None and not complete:
        errors.append("status.completionTime: cannot set completionTime when there is no "
                      "Complete=True condition")
    if complete and new.get("completionTime") is None:
        errors.append("status.completionTime: completionTime is required for Complete jobs")
    if failed and not _true(new, "FailureTarget"):
        errors.append("status.conditions: cannot set Failed=True condition without the "
                      "FailureTarget=true condition")
    if complete and not _true(new, "SuccessCriteriaMet"):
        errors.append("status.conditions: cannot set Complete=True condition without the "
                      "SuccessCriteriaMet=true condition")
    if finished and int(new.get("active") or 0) > 0:
        errors.append("status.active: active>0 is invalid for finished job")
    if finished and new.get("startTime") is None:
        errors.append("status.startTime: startTime is required for finished job")
    if finished and uids:
        errors.append("status.uncountedTerminatedPods: uncountedTerminatedPods needs to be "
                      "empty for finished job")
    if finished and int(new.get("terminating") or 0) > 0:
        errors.append("status.terminating: terminating>0 is invalid for finished job")
    if int(new.get("ready") or 0) > int(new.get("active") or 0):
        errors.append("status.ready: cannot set more ready pods than active")
    for other in ("Failed", "FailureTarget"):
        if _true(new, "SuccessCriteriaMet") and _true(new, other):
            errors.append("status.conditions: cannot set SuccessCriteriaMet=True and "
                          f"{other}=true conditions")
    for kind in ("Failed", "Complete", "FailureTarget", "SuccessCriteriaMet"):
        if _true(old, kind) and not _true(new, kind):
            errors.append(f"status.conditions: cannot disable the terminal {kind}=True "
                          "condition")
    for name in ("failed", "succeeded"):
        if int(new.get(name) or 0) < int(old.get(name) or 0):
            errors.append(f"status.{name}: cannot decrease the {name} counter")
    if (old.get("completionTime") is not None and new.get("completionTime") is not None
            and old["completionTime"] != new["completionTime"]):
        errors.append("status.completionTime: completionTime cannot be mutated")
    if (old.get("startTime") is not None and old.get("startTime") != new.get("startTime")
            and not spec.get("suspend")):
        errors.append("status.startTime: startTime cannot be removed for unsuspended job")
    return errors
