"""Trainer pods owned by edl's controller: the pure rules (no I/O).

Why: the built-in Job controller delays *every* pod creation by a back-off
record that counts every failed pod and resets only on a success
(`pkg/controller/job/backoff_utils.go`). edl's drained trainers exit 143 (Failed)
and trainers succeed only at the very end, so after k shrinks each scale-up of
the trainer Job waited 10 s·2^(k−1), up to 10 minutes (docs/fidelity.md).
The trainer Job is therefore created with ``spec.managedBy`` (Kubernetes'
``JobManagedBy``): the built-in Job controller leaves it alone, and edl's
controller implements the Job's contract for it with these rules (upstream:
``syncJob`` in `pkg/controller/job/job_controller.go`):

* a finished Job (``Complete`` or ``Failed``) is never touched again; a Job with
  ``FailureTarget`` or ``SuccessCriteriaMet`` is ending: nothing is created, and
  the terminal condition follows once no pod is left (sticky across restarts:
  the conditions are in the Job);
* a failed pod is judged by the Job's podFailurePolicy (first matching rule:
  ``FailJob`` fails the Job at once, ``Ignore`` is not counted: edl's own drains and
  deletions exit 143, which the policy ignores) — a disrupted pod (evicted,
  preempted) or one its deletion ended never counts (a shrink); a pod that failed
  and was then deleted still counts, as upstream;
* counters are durable and exact (upstream's ``uncountedTerminatedPods``): a
  finished pod's UID enters the status first, the pod is then marked counted and
  its tracking finalizer removed (one patch), and the next write moves it into
  ``failed``/``succeeded``. The finalizer keeps a finished pod until then, whoever
  deletes it; a pod that does not count and every pod of a finished Job lose it at
  once. Finished pods are kept (their logs too), as upstream keeps them — failed
  ones only the newest ``KEPT_FAILED`` (a ``count/pods`` quota counts terminal pods);
* a crash's replacement waits 10 s, doubling per crash in a row (at most 10 min);
  every other missing trainer is created at once, and a terminating pod holds its
  slot (``podReplacementPolicy: Failed``, defaulted with a podFailurePolicy);
* ``spec.suspend`` deletes the active pods and creates none (Kueue's admission);
* too many trainers: the Autoscaler's named victims, then unscheduled, then
  pending, then the newest go first;
* pods owned by the Job that edl did not create mean another writer (a
  kube-controller-manager ignoring ``managedBy``): edl stands back while one of them
  is live or finished less than ``FOREIGN_QUIET_S`` ago, then takes over; a finished
  foreign pod still holding that writer's tracking finalizer was never counted by it
  and is counted (and released) by edl, one without was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from edl.api.installation import managed_by
from edl.api.names import ANNOTATION_TRAINER_VICTIMS
from edl.control.job_status import keeps_cause
from edl.control.trainer_pods import TrainerPodState, failure_action
from edl.jobparser.manifests import TRAINER_MANAGED_BY

MANAGED_BY = TRAINER_MANAGED_BY
ANNOTATION_VICTIMS = ANNOTATION_TRAINER_VICTIMS
CRASH_BACKOFF_BASE_S = 10.0
CRASH_BACKOFF_MAX_S = 600.0
CRASH_BACKOFF_S = (CRASH_BACKOFF_BASE_S, CRASH_BACKOFF_MAX_S)  # first delay, cap
CRASH_STREAK_RESET_S = 600.0
DEFAULT_BACKOFF_LIMIT = 6
FINISHED = ("Complete", "Failed")
FOREIGN_QUIET_S = 60.0  # a foreign pod finished this recently: its writer may still act
# failed trainers kept (counted) per Job, the newest: their logs stay readable, and no
# more of them eat a namespace's `count/pods` quota (it counts terminal pods)
KEPT_FAILED = 3


@dataclass
class CrashRecord:
    """What the controller remembers of a trainer Job between reconciles, in memory
    only: the counters live in the Job's status (`Ledger`)."""

    streak: int = 0  # crashes in a row (the replacement delay doubles per crash)
    last_crash_at: float | None = None
    owed: int = 0  # crash replacements not yet created (these wait; nothing else does)
    last_failure: str = ""  # "<pod> (exit N): <last line of its message>"
    seen: set[str] = field(default_factory=set)  # uids of finished pods already observed
    problem: str = ""  # why pods are not as asked (a refused create, another writer)


@dataclass(frozen=True)
class Ledger:
    """The Job's counters after folding in what its pods show (upstream's
    ``uncountedTerminatedPods`` protocol); ``mark``: pods to mark counted once the
    status holding their UIDs is written."""

    succeeded: int
    failed: int
    uncounted_succeeded: tuple[str, ...]
    uncounted_failed: tuple[str, ...]
    mark: tuple[str, ...]

    @property
    def total_failed(self) -> int:
        return self.failed + len(self.uncounted_failed)

    @property
    def total_succeeded(self) -> int:
        return self.succeeded + len(self.uncounted_succeeded)


@dataclass(frozen=True)
class TrainerPlan:
    """What to do now; ``retry_at``: reconcile again then (a crash replacement waits)."""

    create: int
    delete: tuple[str, ...]
    retry_at: float | None
    ledger: Ledger
    ending: str | None = None  # "Complete" | "Failed" once decided
    reason: str = ""
    message: str = ""
    finished: bool = False  # the Job is Complete or Failed: nothing to do, nothing to write
    foreign: tuple[str, ...] = ()  # live pods of another writer: edl stands back
    release: tuple[str, ...] = ()  # pods whose tracking finalizer goes now (nothing to count)
    prune: tuple[str, ...] = ()  # counted failed pods beyond the newest KEPT_FAILED
    active: int = 0
    ready: int = 0
    terminating: int = 0


def true_conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in status.get("conditions") or ()
            if c.get("status") == "True"}


def is_finished(status: Mapping[str, Any]) -> bool:
    return any(kind in true_conditions(status) for kind in FINISHED)


def crash_delay_s(streak: int, base_s: float = CRASH_BACKOFF_BASE_S,
                  max_s: float = CRASH_BACKOFF_MAX_S) -> float:
    """Wait before replacing the latest crash: 10 s, doubling per crash in a row, capped."""
    return min(base_s * 2 ** (max(streak, 1) - 1), max_s)


def outcome(spec: Mapping[str, Any], pod: TrainerPodState) -> str | None:
    """How a finished pod counts: ``succeeded``, ``failed`` or None (not at all: it was
    disrupted, its deletion ended it, or the podFailurePolicy ignores it). A pod that
    failed and was deleted afterwards still counts (upstream's ``isPodFailed``): the
    tracking finalizer keeps it until it is counted."""
    if pod.phase == "Succeeded":
        return "succeeded"
    if pod.phase != "Failed" or pod.disrupted:
        return None
    if pod.deleting and not pod.failed_before_deletion:
        return None
    return None if failure_action(spec, pod) == "Ignore" else "failed"


def settled(pod: TrainerPodState) -> bool:
    """The pod's outcome is in the Job's counters: edl marked it counted, or another
    writer's pod lost that writer's tracking finalizer (it counted it)."""
    return pod.counted or (not pod.ours and not pod.tracked)


def tally(spec: Mapping[str, Any], status: Mapping[str, Any],
          pods: Sequence[TrainerPodState]) -> Ledger:
    """The durable counters: UIDs the status lists as uncounted move into the counters
    once their pod is marked counted (or gone); newly finished pods become uncounted."""
    succeeded = int(status.get("succeeded") or 0)
    failed = int(status.get("failed") or 0)
    uncounted = status.get("uncountedTerminatedPods") or {}
    by_uid = {p.uid: p for p in pods}
    pending: dict[str, list[str]] = {"succeeded": [], "failed": []}
    for held in ("succeeded", "failed"):
        for uid in uncounted.get(held) or ():
            pod = by_uid.get(uid)
            if pod is None or settled(pod):
                succeeded, failed = (succeeded + 1, failed) if held == "succeeded" else (
                    succeeded, failed + 1)
            else:
                pending[held].append(uid)
    listed = set(pending["succeeded"]) | set(pending["failed"])
    for pod in sorted(pods, key=lambda p: (p.finished_at or 0.0, p.name)):
        if not pod.finished or settled(pod) or pod.uid in listed:
            continue
        kind = outcome(spec, pod)
        if kind is not None:
            pending[kind].append(pod.uid)
            listed.add(pod.uid)
    mark = tuple(p.name for p in pods if p.uid in listed and not settled(p))
    return Ledger(succeeded, failed, tuple(pending["succeeded"]), tuple(pending["failed"]),
                  mark)


def _failure_line(pod: TrainerPodState) -> str:
    lines = [line.strip() for line in pod.message.splitlines() if line.strip()]
    why = f": {lines[-1][:500]}" if lines else ""
    code = "no exit code" if pod.exit_code is None else f"exit {pod.exit_code}"
    return f"{pod.name} ({code}){why}"


def observe(spec: Mapping[str, Any], record: CrashRecord,
            pods: Sequence[TrainerPodState]) -> TrainerPodState | None:
    """Note newly finished pods in the in-memory record (crash streak, owed
    replacements, the last failure); returns a pod whose failure fails the Job."""
    fatal = None
    for pod in sorted((p for p in pods if p.finished), key=lambda p: p.finished_at or 0.0):
        if outcome(spec, pod) == "failed" and failure_action(spec, pod) == "FailJob":
            fatal = fatal or pod
        if pod.uid in record.seen:
            continue
        record.seen.add(pod.uid)
        if outcome(spec, pod) != "failed":
            continue
        ran = (pod.finished_at or 0.0) - pod.started_at if pod.started_at is not None else 0.0
        record.streak = 1 if ran >= CRASH_STREAK_RESET_S else record.streak + 1
        record.owed += 1
        record.last_crash_at = pod.finished_at
        line = _failure_line(pod)
        if not keeps_cause(record.last_failure, line):
            record.last_failure = line
    return fatal


def _removal_rank(pod: TrainerPodState, victims: frozenset[str]) -> tuple[bool, bool, bool,
                                                                           float]:
    """The Autoscaler's victims, then unscheduled, then pending, then the newest first."""
    return (pod.name not in victims, pod.node is not None, pod.phase == "Running",
            -pod.created_at)


def victims_of(job: Mapping[str, Any]) -> frozenset[str]:
    text = ((job.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_VICTIMS)
    return frozenset(n for n in str(text or "").split(",") if n)


def _ending(spec: Mapping[str, Any], status: Mapping[str, Any], ledger: Ledger,
            fatal: TrainerPodState | None) -> tuple[str | None, str, str]:
    """The Job's end, once decided (sticky: read back from its interim condition)."""
    conditions = true_conditions(status)
    if "FailureTarget" in conditions:
        held = conditions["FailureTarget"]
        return "Failed", str(held.get("reason") or ""), str(held.get("message") or "")
    if "SuccessCriteriaMet" in conditions:
        return "Complete", "", ""
    if fatal is not None:
        return ("Failed", "PodFailurePolicy", f"Pod {fatal.name} failed with exit code "
                f"{fatal.exit_code} matching a FailJob rule")
    limit = int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
    if ledger.total_failed > limit:
        return ("Failed", "BackoffLimitExceeded",
                f"{ledger.total_failed} trainer crashes, more than backoffLimit {limit}")
    if ledger.total_succeeded > 0:
        return "Complete", "CompletionsReached", "a trainer finished the work"
    return None, "", ""


def plan_trainers(
    job: Mapping[str, Any],
    pods: Sequence[TrainerPodState],
    record: CrashRecord,
    now: float,
    base_s: float = CRASH_BACKOFF_BASE_S,
    max_s: float = CRASH_BACKOFF_MAX_S,
) -> TrainerPlan:
    """The pods to create and delete for this trainer Job (its claimed pods; updates
    ``record``)."""
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    live = [p for p in pods if not p.finished]
    active = [p for p in live if not p.deleting]
    n_active, n_ready, n_terminating = (len(active), sum(p.ready for p in active),
                                        len(live) - len(active))
    ledger = tally(spec, status, pods)
    if is_finished(status):  # sticky: a finished Job gets no pod and no status write, ever
        return TrainerPlan(0, tuple(p.name for p in active), None, ledger, finished=True,
                           active=n_active, ready=n_ready, terminating=n_terminating,
                           release=tuple(p.name for p in pods if p.tracked))
    foreign = tuple(p.name for p in pods if not p.ours and foreign_active(p, now))
    if foreign:
        return TrainerPlan(0, (), None, ledger, foreign=foreign, active=n_active,
                           ready=n_ready, terminating=n_terminating)
    plan = _plan_running(job, pods, record, now, base_s, max_s, ledger)
    release = tuple(p.name for p in pods if p.tracked and p.finished and not settled(p)
                    and p.uid not in ledger.uncounted_succeeded
                    and p.uid not in ledger.uncounted_failed and outcome(spec, p) is None)
    return replace(plan, active=n_active, ready=n_ready, terminating=n_terminating,
                   release=release, prune=prunable(pods))


def prunable(pods: Sequence[TrainerPodState], keep: int = KEPT_FAILED) -> tuple[str, ...]:
    """Failed pods already counted and released, all but the newest ``keep``: a
    ``count/pods`` quota counts terminal pods, so kept failures would block new ones."""
    done = sorted((p for p in pods if p.ours and p.phase == "Failed" and p.counted
                   and not p.tracked and not p.deleting),
                  key=lambda p: (p.finished_at or 0.0, p.name))
    return tuple(p.name for p in done[: max(len(done) - keep, 0)])


def foreign_active(pod: TrainerPodState, now: float) -> bool:
    """Another writer's pod that says the writer may still act: live, or finished less
    than ``FOREIGN_QUIET_S`` ago (it may be about to replace it)."""
    return not pod.finished or (pod.finished_at or 0.0) > now - FOREIGN_QUIET_S


def _plan_running(job: Mapping[str, Any], pods: Sequence[TrainerPodState],
                  record: CrashRecord, now: float, base_s: float, max_s: float,
                  ledger: Ledger) -> TrainerPlan:
    """`plan_trainers` for a Job that is not finished and that no one else runs."""
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    live = [p for p in pods if not p.finished]
    active = [p for p in live if not p.deleting]
    n_terminating = len(live) - len(active)
    fatal = observe(spec, record, pods)
    ending, reason, message = _ending(spec, status, ledger, fatal)
    if ending == "Failed" or (ending is None and spec.get("suspend")):
        record.owed = 0
        return TrainerPlan(0, tuple(p.name for p in active), None, ledger, ending, reason,
                           message)
    if ending == "Complete":  # the work is done: let the others finish, create none
        return TrainerPlan(0, (), None, ledger, ending)
    parallelism = max(int(spec.get("parallelism", 1)), 0)
    if len(active) > parallelism:
        victims = victims_of(job)
        excess = sorted(active, key=lambda p: _removal_rank(p, victims))
        record.owed = 0
        return TrainerPlan(0, tuple(p.name for p in excess[: len(active) - parallelism]),
                           None, ledger)
    holding = len(active) + (n_terminating if _replace_only_failed(spec) else 0)
    missing = max(parallelism - holding, 0)
    record.owed = min(record.owed, missing)
    create, retry_at = missing - record.owed, None
    if record.owed:
        ready_at = (record.last_crash_at or now) + crash_delay_s(record.streak, base_s, max_s)
        if ready_at <= now:
            create, record.owed = missing, 0
        else:
            retry_at = ready_at
    return TrainerPlan(create, (), retry_at, ledger)


def _replace_only_failed(spec: Mapping[str, Any]) -> bool:
    """``podReplacementPolicy: Failed`` (the default with a podFailurePolicy): a
    terminating pod is replaced only once it has failed."""
    default = "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    return spec.get("podReplacementPolicy", default) == "Failed"


def job_status(job: Mapping[str, Any], plan: TrainerPlan, created: int, deleted: int,
               now: float) -> dict[str, Any]:
    """The trainer Job's status after this pass, as the API server's validation of
    externally managed Jobs asks (upstream `validation.go`, ``validateJobStatus``):
    ``FailureTarget`` before ``Failed`` and ``SuccessCriteriaMet`` before ``Complete``,
    a terminal condition only once no pod is active or terminating and nothing is
    uncounted, ``completionTime`` only with ``Complete``, counters never lower, every
    condition with its ``lastTransitionTime``; startTime cleared while suspended."""
    spec = job.get("spec") or {}
    previous = job.get("status") or {}
    ledger = plan.ledger
    active = plan.active - deleted + created
    terminating = plan.terminating + deleted
    suspended = bool(spec.get("suspend")) and plan.ending is None
    status: dict[str, Any] = {
        "active": active, "ready": min(plan.ready, active), "terminating": terminating,
        "succeeded": ledger.succeeded, "failed": ledger.failed,
        "uncountedTerminatedPods": {"succeeded": list(ledger.uncounted_succeeded),
                                    "failed": list(ledger.uncounted_failed)},
        "startTime": None if suspended else _first(previous.get("startTime"), now),
    }
    conditions = [dict(c) for c in previous.get("conditions") or ()]
    _suspension(conditions, suspended, now)
    have = true_conditions({"conditions": conditions})
    if plan.ending is not None:
        interim = "FailureTarget" if plan.ending == "Failed" else "SuccessCriteriaMet"
        wanted = [interim]
        settled = (active == 0 and terminating == 0 and not ledger.uncounted_failed
                   and not ledger.uncounted_succeeded)
        if settled:
            wanted.append(plan.ending)
        for kind in wanted:
            if kind not in have:
                conditions.append(condition(kind, plan.reason, plan.message, now))
        if settled and plan.ending == "Complete":
            status["completionTime"] = _first(previous.get("completionTime"), now)
    if conditions:
        status["conditions"] = conditions
    return status


def _first(value: Any, default: Any) -> Any:
    return default if value is None else value


def _suspension(conditions: list[dict[str, Any]], suspended: bool, now: float) -> None:
    held = next((c for c in conditions if c.get("type") == "Suspended"), None)
    if suspended and (held is None or held.get("status") != "True"):
        fresh = condition("Suspended", "JobSuspended", "Job suspended", now)
        conditions[:] = [c for c in conditions if c.get("type") != "Suspended"] + [fresh]
    elif not suspended and held is not None and held.get("status") == "True":
        held.update(condition("Suspended", "JobResumed", "Job resumed", now, "False"))


def condition(kind: str, reason: str, message: str, now: float,
              state: str = "True") -> dict[str, Any]:
    return {"type": kind, "status": state, "reason": reason, "message": message,
            "lastProbeTime": now, "lastTransitionTime": now}


def is_managed(job: Mapping[str, Any]) -> bool:
    """Whether this installation of edl's controller (not the built-in Job controller,
    not another installation) runs this Job's pods."""
    return (job.get("spec") or {}).get("managedBy") == managed_by()
