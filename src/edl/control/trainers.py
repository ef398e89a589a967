"""Trainer pods owned by edl's controller: the pure rules (no I/O).

Why: the built-in Job controller delays *every* pod creation by a back-off
record that counts every failed pod and resets only on a success
(`pkg/controller/job/backoff_utils.go`). edl's drained trainers exit 143 (Failed)
and trainers succeed only at the very end, so after k shrinks each scale-up of
the trainer Job waited 10 s·2^(k−1), up to 10 minutes (docs/fidelity.md).
The trainer Job is therefore created with ``spec.managedBy`` (Kubernetes'
``JobManagedBy``): the built-in Job controller leaves it alone, and edl's
controller creates, deletes and counts its pods with these rules, as Kubeflow's
training operator and KubeRay own their workers:

* a pod that failed without having been deleted or disrupted (no
  deletionTimestamp, no ``DisruptionTarget`` condition) is a **crash**: it counts
  against ``backoffLimit`` (the Job fails once crashes exceed it) and its
  replacement waits 10 s, doubling per crash in a row (at most 10 min; a trainer
  that ran 10 min starts a new streak);
* every other missing trainer (a scale-up, a drained or evicted trainer's
  replacement) is created at once: scale-downs never delay scale-ups;
* too many trainers: unscheduled, then pending, then the newest go first (the
  Autoscaler normally names its victims itself);
* once a trainer exits 0 the work is done: no new pod, Complete when none is left.

`plan_trainers` is a function of the Job, its pods, the crash record and the time;
the Controller (`trainer_controller`) applies the plan through the `Cluster` port.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from edl.jobparser.manifests import TRAINER_MANAGED_BY

MANAGED_BY = TRAINER_MANAGED_BY
CRASH_BACKOFF_BASE_S = 10.0
CRASH_BACKOFF_MAX_S = 600.0
CRASH_BACKOFF_S = (CRASH_BACKOFF_BASE_S, CRASH_BACKOFF_MAX_S)  # first delay, cap
CRASH_STREAK_RESET_S = 600.0
DEFAULT_BACKOFF_LIMIT = 6
TRAINER_CONTAINER = "trainer"


@dataclass(frozen=True)
class TrainerPodState:
    """One trainer pod as the rules need it (from a pod manifest: `pod_state`)."""

    name: str
    uid: str
    node: str | None
    phase: str  # Pending | Running | Succeeded | Failed
    deleting: bool  # deletionTimestamp set
    disrupted: bool  # DisruptionTarget condition True (eviction, preemption)
    exit_code: int | None  # the trainer container's terminated exit code, if any
    created_at: float
    started_at: float | None
    finished_at: float | None
    message: str = ""  # the trainer container's termination message

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def crashed(self) -> bool:
        """Failed on its own: not deleted by anyone, not disrupted."""
        return self.phase == "Failed" and not self.deleting and not self.disrupted


@dataclass
class CrashRecord:
    """What the controller remembers of a trainer Job between reconciles (in memory;
    ``failed`` and ``succeeded`` are also in the Job's status, so they survive restarts)."""

    failed: int = 0  # crashes counted against backoffLimit
    succeeded: int = 0
    streak: int = 0  # crashes in a row (the replacement delay doubles per crash)
    last_crash_at: float | None = None
    owed: int = 0  # crash replacements not yet created (these wait; nothing else does)
    last_failure: str = ""  # "<pod> (exit N): <last line of its message>"
    seen: set[str] = field(default_factory=set)  # uids of finished pods already counted


@dataclass(frozen=True)
class TrainerPlan:
    """What to do now; ``retry_at``: reconcile again then (a crash replacement waits)."""

    create: int
    delete: tuple[str, ...]
    collect: tuple[str, ...]  # finished pods, counted: remove them
    retry_at: float | None
    condition: str | None  # "Complete" | "Failed" | None
    reason: str = ""
    message: str = ""
    active: int = 0
    running: int = 0
    terminating: int = 0


def crash_delay_s(streak: int, base_s: float = CRASH_BACKOFF_BASE_S,
                  max_s: float = CRASH_BACKOFF_MAX_S) -> float:
    """Wait before replacing the latest crash: 10 s, doubling per crash in a row, capped."""
    return min(base_s * 2 ** (max(streak, 1) - 1), max_s)


def _removal_rank(pod: TrainerPodState) -> tuple[bool, bool, float]:
    """Unscheduled, then pending, then the newest first (as the Job controller)."""
    return (pod.node is not None, pod.phase == "Running", -pod.created_at)


def _failure_line(pod: TrainerPodState) -> str:
    lines = [line.strip() for line in pod.message.splitlines() if line.strip()]
    why = f": {lines[-1][:500]}" if lines else ""
    code = "no exit code" if pod.exit_code is None else f"exit {pod.exit_code}"
    return f"{pod.name} ({code}){why}"


def account(record: CrashRecord, pods: Iterable[TrainerPodState]) -> list[str]:
    """Count newly finished pods into ``record``; returns their names (to collect)."""
    collected = []
    for pod in sorted((p for p in pods if p.finished), key=lambda p: p.finished_at or 0.0):
        collected.append(pod.name)
        if pod.uid in record.seen:
            continue
        record.seen.add(pod.uid)
        if pod.phase == "Succeeded":
            record.succeeded += 1
            continue
        if not pod.crashed:
            continue  # drained, deleted or evicted: replaced at once, never counted
        ran = (pod.finished_at or 0.0) - pod.started_at if pod.started_at is not None else 0.0
        record.streak = 1 if ran >= CRASH_STREAK_RESET_S else record.streak + 1
        record.failed += 1
        record.owed += 1
        record.last_crash_at = pod.finished_at
        record.last_failure = _failure_line(pod)
    return collected


def plan_trainers(
    spec: Mapping[str, Any],
    pods: Sequence[TrainerPodState],
    record: CrashRecord,
    now: float,
    base_s: float = CRASH_BACKOFF_BASE_S,
    max_s: float = CRASH_BACKOFF_MAX_S,
) -> TrainerPlan:
    """The pods to create and delete for a trainer Job with this spec (updates ``record``)."""
    collect = tuple(account(record, pods))
    live = [p for p in pods if not p.finished]
    active = [p for p in live if not p.deleting]
    terminating = len(live) - len(active)
    running = sum(p.phase == "Running" for p in active)
    counts: dict[str, Any] = {"active": len(active), "running": running,
                              "terminating": terminating}
    limit = int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
    fatal = next((p for p in pods if p.crashed and fails_job(spec, p.exit_code)), None)
    if fatal is not None:  # the Job's FailJob rule (exit 78: a configuration no retry fixes)
        return TrainerPlan(
            0, tuple(p.name for p in active), collect, None, "Failed", "PodFailurePolicy",
            f"Pod {fatal.name} failed with exit code {fatal.exit_code} matching a FailJob rule",
            **counts,
        )
    if record.failed > limit:
        return TrainerPlan(
            0, tuple(p.name for p in active), collect, None, "Failed", "BackoffLimitExceeded",
            f"{record.failed} trainer crashes, more than backoffLimit {limit}", **counts,
        )
    if record.succeeded > 0:  # the work is done: let the others finish, create none
        done = "Complete" if not active else None
        return TrainerPlan(0, (), collect, None, done, **counts)
    parallelism = max(int(spec.get("parallelism", 1)), 0)
    if len(active) > parallelism:
        excess = sorted(active, key=_removal_rank)[: len(active) - parallelism]
        record.owed = 0
        return TrainerPlan(0, tuple(p.name for p in excess), collect, None, None, **counts)
    missing = parallelism - len(active)
    record.owed = min(record.owed, missing)
    create, retry_at = missing - record.owed, None
    if record.owed:
        ready_at = (record.last_crash_at or now) + crash_delay_s(record.streak, base_s, max_s)
        if ready_at <= now:
            create, record.owed = missing, 0
        else:
            retry_at = ready_at
    return TrainerPlan(create, (), collect, retry_at, None, **counts)


def fails_job(spec: Mapping[str, Any], exit_code: int | None) -> bool:
    """Whether the Job's podFailurePolicy has a ``FailJob`` rule matching this exit code
    of the trainer container (``In`` / ``NotIn`` on ``onExitCodes``)."""
    if exit_code is None:
        return False
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or ():
        codes = rule.get("onExitCodes")
        if rule.get("action") != "FailJob" or not codes:
            continue
        if codes.get("containerName") not in (None, TRAINER_CONTAINER):
            continue
        values = set(codes.get("values") or ())
        if codes.get("operator", "In") == "In" and exit_code in values:
            return True
        if codes.get("operator") == "NotIn" and exit_code != 0 and exit_code not in values:
            return True
    return False


def pod_state(pod: Mapping[str, Any]) -> TrainerPodState:
    """A trainer pod manifest (Kubernetes or in-process) as the rules see it.

    Times are seconds: in-process manifests carry floats; Kubernetes' RFC 3339
    strings are converted by the adapter before this (``to_seconds``).
    """
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    exit_code, message, finished_at = None, "", None
    for container in status.get("containerStatuses") or ():
        terminated = (container.get("state") or {}).get("terminated")
        if terminated is None:
            continue
        if container.get("name") == TRAINER_CONTAINER or exit_code is None:
            exit_code = int(terminated.get("exitCode", 0))
            message = str(terminated.get("message") or "")
            finished_at = terminated.get("finishedAt", finished_at)
    disrupted = any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    phase = str(status.get("phase") or "Pending")
    created = metadata.get("creationTimestamp") or 0.0
    if phase in ("Succeeded", "Failed") and finished_at is None:
        finished_at = status.get("finishedAt", created)
    return TrainerPodState(
        name=str(metadata.get("name", "")),
        uid=str(metadata.get("uid") or metadata.get("name", "")),
        node=(pod.get("spec") or {}).get("nodeName") or None,
        phase=phase,
        deleting=metadata.get("deletionTimestamp") is not None,
        disrupted=disrupted,
        exit_code=exit_code,
        created_at=float(created),
        started_at=None if status.get("startTime") is None else float(status["startTime"]),
        finished_at=None if finished_at is None else float(finished_at),
        message=message,
    )


def job_status(plan: TrainerPlan, record: CrashRecord, previous: Mapping[str, Any],
               now: float) -> dict[str, Any]:
    """The trainer Job's status as edl's controller writes it (the built-in's fields).

    As the API server's validation of externally managed Jobs asks, a terminal
    condition comes after its interim one (``FailureTarget`` before ``Failed``,
    ``SuccessCriteriaMet`` before ``Complete``), and only once no pod is active or
    terminating; ``Complete`` comes with ``completionTime``.
    """
    status: dict[str, Any] = {
        "active": plan.active, "succeeded": record.succeeded, "failed": record.failed,
        "terminating": plan.terminating, "ready": plan.running,
        "startTime": previous.get("startTime", now),
    }
    conditions = [dict(c) for c in previous.get("conditions") or ()]
    if plan.condition is not None:
        interim = "FailureTarget" if plan.condition == "Failed" else "SuccessCriteriaMet"
        have = {c.get("type") for c in conditions}
        wanted = [interim]
        if plan.active == 0 and plan.terminating == 0 and not plan.delete:
            wanted.append(plan.condition)
        for kind in wanted:
            if kind in have:
                continue
            condition = {"type": kind, "status": "True"}
            if plan.reason:
                condition["reason"] = plan.reason
                condition["message"] = plan.message
            conditions.append(condition)
            if kind == "Complete":
                status["completionTime"] = now
    if "completionTime" in previous:
        status["completionTime"] = previous["completionTime"]
    if conditions:
        status["conditions"] = conditions
    return status


def trainer_pod(job: Mapping[str, Any], index: int) -> dict[str, Any]:
    """A new trainer pod from the Job's template: ``<job>-<5 base-36 digits>``, owned by it."""
    metadata = job["metadata"]
    template = (job.get("spec") or {}).get("template") or {}
    template_meta = template.get("metadata") or {}
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text, rest = "", index
    while True:
        rest, digit = divmod(rest, 36)
        text = digits[digit] + text
        if not rest:
            break
    reference = {"apiVersion": "batch/v1", "kind": "Job", "name": metadata["name"],
                 "controller": True, "blockOwnerDeletion": True}
    if metadata.get("uid"):
        reference["uid"] = metadata["uid"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{metadata['name']}-{text.rjust(5, '0')}",
            "namespace": metadata.get("namespace") or "default",
            "labels": dict(template_meta.get("labels") or {}),
            "annotations": dict(template_meta.get("annotations") or {}),
            "ownerReferences": [reference],
        },
        "spec": dict(template.get("spec") or {}),
    }


def is_managed(job: Mapping[str, Any]) -> bool:
    """Whether edl's controller (not the built-in Job controller) runs this Job's pods."""
    return (job.get("spec") or {}).get("managedBy") == MANAGED_BY
