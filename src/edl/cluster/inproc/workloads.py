"""The rules of Kubernetes' ReplicaSet, Deployment and Job controllers, as pure functions.

The plane (`plane.InProcessCluster`) applies them: it asks how many pods an
owner wants, builds pods from its template, and writes its status. Keeping the
rules here, free of the event loop, makes them easy to read against the
Kubernetes documentation and to test on plain data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edl.cluster.inproc.pods import OwnerKey, OwnerPods
from edl.cluster.port import Manifest

DEFAULT_BACKOFF_LIMIT = 6
# CrashLoopBackOff (kubelet): a ReplicaSet pod's restart waits 10 s, doubling, at most 5 min,
# and a container that ran 10 min starts a new streak
BACKOFF_BASE_S = 10.0
BACKOFF_MAX_S = 300.0
BACKOFF_RESET_S = 600.0
# the Job controller's pod-failure back-off (DefaultJobPodFailureBackOff, MaxJobPodFailureBackOff)
JOB_BACKOFF_BASE_S = 10.0
JOB_BACKOFF_MAX_S = 600.0
# spec.podReplacementPolicy
TERMINATING_OR_FAILED = "TerminatingOrFailed"
REPLACE_FAILED = "Failed"
COMPLETE = "Complete"
FAILED = "Failed"
# podFailurePolicy actions (FailIndex only exists for indexed Jobs: counted here)
IGNORE = "Ignore"
COUNT = "Count"
FAIL_JOB = "FailJob"
# reasons of a Job's Failed condition, and Kubernetes' message for the first
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
BACKOFF_LIMIT_MESSAGE = "Job has reached the specified backoff limit"
POD_FAILURE_POLICY = "PodFailurePolicy"


def wanted_pods(kind: str, spec: Mapping[str, Any], owner: OwnerPods) -> tuple[int, str | None]:
    """(active pods the owner wants now, its final condition or None).

    ReplicaSet/Deployment: ``spec.replicas`` (default 1). Job: ``parallelism``
    (default 1), except that a Job that failed more than ``backoffLimit`` times
    is Failed; one without ``completions`` (a work queue) creates no pod once
    one has succeeded and is Complete when none is left; one with
    ``completions`` runs at most the completions still missing.
    """
    if kind != "Job":
        return int(spec.get("replicas", 1)), None
    if owner.condition is not None:
        return 0, owner.condition
    parallelism = int(spec.get("parallelism", 1))
    if owner.failed > int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)):
        return 0, FAILED
    completions = spec.get("completions")
    if completions is None:
        if owner.succeeded > 0:  # the work is done: let the others finish, create none
            return min(parallelism, owner.active), COMPLETE if owner.active == 0 else None
        return parallelism, None
    remaining = int(completions) - owner.succeeded
    if remaining <= 0:
        return 0, COMPLETE
    return min(parallelism, remaining), None


def pod_failure_action(spec: Mapping[str, Any], pod: Mapping[str, Any]) -> tuple[str, int | None]:
    """(action, index of the matching rule) for a failed pod of a Job, as Kubernetes decides.

    The Job's ``podFailurePolicy`` rules are tried in order and the first that
    matches wins: ``onExitCodes`` looks at the terminated exit codes in the
    pod's ``status.containerStatuses`` (``containerName`` limits it to one
    container; ``In`` matches a listed code, ``NotIn`` a non-zero code not
    listed), ``onPodConditions`` at ``status.conditions`` (``status`` defaults
    to "True"). No rule matching, or no policy, means ``Count``: the failure
    counts against ``backoffLimit``.
    """
    policy = spec.get("podFailurePolicy") or {}
    status = pod.get("status") or {}
    for index, rule in enumerate(policy.get("rules") or ()):
        exit_codes = rule.get("onExitCodes")
        if exit_codes is not None and _exit_codes_match(exit_codes, status):
            return str(rule.get("action", COUNT)), index
        conditions = rule.get("onPodConditions")
        if conditions and _conditions_match(conditions, status):
            return str(rule.get("action", COUNT)), index
    return COUNT, None


def _exit_codes_match(requirement: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    name = requirement.get("containerName")
    values = set(requirement.get("values") or ())
    operator = requirement.get("operator", "In")
    for container in status.get("containerStatuses") or ():
        if name is not None and container.get("name") != name:
            continue
        terminated = (container.get("state") or {}).get("terminated")
        if terminated is None:
            continue
        code = int(terminated.get("exitCode", 0))
        if operator == "In" and code in values:
            return True
        if operator == "NotIn" and code != 0 and code not in values:
            return True
    return False


def _conditions_match(patterns: Any, status: Mapping[str, Any]) -> bool:
    present = {(c.get("type"), c.get("status")) for c in status.get("conditions") or ()}
    return any((p.get("type"), p.get("status", "True")) in present for p in patterns)


def crash_backoff_s(
    streak: int, base_s: float = BACKOFF_BASE_S, max_s: float = BACKOFF_MAX_S
) -> float:
    """Delay before replacing a failed pod, as CrashLoopBackOff: 10 s, doubling, at most 5 min."""
    return min(base_s * 2 ** (max(streak, 1) - 1), max_s)


def job_backoff_remaining_s(
    failures_after_success: int,
    last_failure_at: float | None,
    now: float,
    base_s: float = JOB_BACKOFF_BASE_S,
    max_s: float = JOB_BACKOFF_MAX_S,
) -> float:
    """``getRemainingTimeForFailuresCount`` (`pkg/controller/job/backoff_utils.go`).

    The Job controller creates no pod (replacement *or* scale-up) until this is 0:
    ``base`` doubled once per failure after the first, capped at ``max``, minus the
    time since the last failure. Every failed pod counts, whatever the
    podFailurePolicy says; only a succeeded pod resets the record.
    """
    if failures_after_success <= 0 or last_failure_at is None:
        return 0.0
    delay = base_s
    for _ in range(1, failures_after_success):
        delay *= 2
        if delay >= max_s:
            delay = max_s
            break
    elapsed = now - last_failure_at
    return 0.0 if delay < elapsed else delay - elapsed


JOB_CONTROLLER = "kubernetes.io/job-controller"


def managed_elsewhere(spec: Mapping[str, Any]) -> bool:
    """``spec.managedBy`` names another controller: the Job controller leaves the Job
    (its pods and status) alone (``JobManagedBy``, Kubernetes >= 1.32)."""
    managed_by = spec.get("managedBy")
    return managed_by is not None and managed_by != JOB_CONTROLLER


def pod_replacement_policy(spec: Mapping[str, Any]) -> str:
    """``spec.podReplacementPolicy``: default ``Failed`` with a podFailurePolicy (the only
    value allowed with one), else ``TerminatingOrFailed`` (Kubernetes >= 1.29)."""
    default = REPLACE_FAILED if spec.get("podFailurePolicy") is not None else TERMINATING_OR_FAILED
    return str(spec.get("podReplacementPolicy") or default)


def pod_name(owner_name: str, index: int) -> str:
    """``<owner>-<5 base-36 digits>``, like the random suffix Kubernetes adds, but counted."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        index, rest = divmod(index, 36)
        text = digits[rest] + text
        if not index:
            return f"{owner_name}-{text.rjust(5, '0')}"


def pod_from_template(key: OwnerKey, owner_obj: Manifest, index: int) -> Manifest:
    """A new pod manifest from an owner's ``spec.template``, with its ownerReference.

    The pod's ``spec`` is a shallow copy: containers are shared with the stored
    template, which is never mutated, so pods must treat them as read-only.
    """
    kind, namespace, owner_name = key
    template = owner_obj["spec"].get("template") or {}
    template_meta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(owner_name, index),
            "namespace": namespace,
            "labels": dict(template_meta.get("labels") or {}),
            "annotations": dict(template_meta.get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": owner_obj.get("apiVersion", ""),
                    "kind": kind,
                    "name": owner_name,
                    "uid": owner_obj["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": dict(template.get("spec") or {}),
    }


def owner_status(kind: str, owner: OwnerPods) -> dict[str, Any]:
    """The ``status`` an owner's controller would write, from its pod counts."""
    if kind == "Job":
        status: dict[str, Any] = {
            "active": owner.active,
            "succeeded": owner.succeeded,
            "failed": owner.failed,
            "terminating": owner.terminating,
        }
        if owner.condition is not None:
            condition = {"type": owner.condition, "status": "True"}
            if owner.condition == FAILED:
                condition["reason"] = owner.failure_reason or BACKOFF_LIMIT_EXCEEDED
                condition["message"] = owner.failure_condition_message or BACKOFF_LIMIT_MESSAGE
            status["conditions"] = [condition]
        return status
    return {
        "replicas": owner.active,
        "readyReplicas": owner.running,
        "availableReplicas": owner.running,
    }
