"""`WorkloadControllers`: the ReplicaSet, Deployment and Job controllers and the garbage
collector of the in-process cluster.

They react to the object store and to pod exits, and keep each owner's active
pods at the count its rules want (`workloads`, pure functions):

* scaling down deletes unscheduled, then pending, then the newest running pods;
* a failed pod is replaced after a back-off (10 s, doubling, at most 5 min), as
  CrashLoopBackOff and the Job controller do, so a crashing process cannot spin;
* a Job without ``completions`` completes once one pod has exited 0 and none is
  left running; a Job whose pods failed more than ``backoffLimit`` (default 6)
  times fails (condition Failed, reason ``BackoffLimitExceeded``; its other pods
  are deleted). A failure counts unless the Job's ``podFailurePolicy`` says
  ``Ignore`` (exit codes, pod conditions such as ``DisruptionTarget``);
  ``FailJob`` fails the Job at once. A deleted Job pod that exits non-zero is a
  failure too; a pod deleted before it was bound never counts;
* a deleted owner takes its pods along, and a deleted TrainingJob its children
  (``ownerReferences``), as Kubernetes' garbage collector.

How closely each rule follows Kubernetes is in docs/fidelity.md where written,
else in docs/simulation.md.
"""

from __future__ import annotations

import contextlib
import functools

from edl.accounting import pod_request
from edl.api.names import object_key
from edl.cluster.inproc.kubelet import PodLifecycle
from edl.cluster.inproc.pods import FAILED, OwnerKey, OwnerPods, PodRecord
from edl.cluster.inproc.store import ObjectStore
from edl.cluster.inproc.workloads import (
    BACKOFF_RESET_S,
    FAIL_JOB,
    IGNORE,
    POD_FAILURE_POLICY,
    crash_backoff_s,
    owner_status,
    pod_failure_action,
    pod_from_template,
    wanted_pods,
)
from edl.cluster.port import Clock, Manifest, NotFoundError

LAST_FAILURE_CHARS = 500  # of a failed pod's message, kept for the TrainingJob's status
TRAINING_JOB = "TrainingJob"
WORKLOAD_KINDS = ("ReplicaSet", "Deployment", "Job")


class WorkloadControllers:
    """Reconciles every ReplicaSet, Deployment and Job of the store into pods."""

    def __init__(
        self,
        clock: Clock,
        store: ObjectStore,
        pods: PodLifecycle,
        owners: dict[OwnerKey, OwnerPods],
        backoff_base_s: float,
        backoff_max_s: float,
    ) -> None:
        self.clock = clock
        self.store = store
        self.pods = pods
        self.owners = owners
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._dirty: dict[OwnerKey, None] = {}
        self._flush_scheduled = False
        # owner uid -> objects naming it in ownerReferences (garbage collection)
        self._dependents: dict[str, dict[tuple[str, str, str], None]] = {}
        pods.on_exit = self._pod_exited
        for kind in WORKLOAD_KINDS:
            store.listen(kind, functools.partial(self._workload_event, kind))
        for kind in (*WORKLOAD_KINDS, "Service"):
            store.listen(kind, functools.partial(self._track_owner, kind))
        store.listen(TRAINING_JOB, self._collect_garbage)

    def with_status(self, kind: str, obj: Manifest) -> Manifest:
        """Fill ``status`` from the live counters (the controllers' status writes)."""
        namespace, name = object_key(obj)
        obj["status"] = owner_status(kind, self.owners.get((kind, namespace, name)) or OwnerPods())
        return obj

    # -- store events ----------------------------------------------------------------------
    def _workload_event(
        self, kind: str, event: str, obj: Manifest, old: Manifest | None
    ) -> None:
        namespace, name = object_key(obj)
        key: OwnerKey = (kind, namespace, name)
        if event == "DELETED":  # cascade now, so a same-named successor starts clean
            self._reconcile(key)
            return
        if event == "ADDED":
            owner = self.owners.setdefault(key, OwnerPods())
            owner.succeeded = owner.failed = 0
            owner.condition = owner.failure_reason = None
            owner.failure_condition_message = owner.last_failure = ""
            owner.generation = -1
        self._mark_dirty(key)

    def _track_owner(self, kind: str, event: str, obj: Manifest, old: Manifest | None) -> None:
        if event == "MODIFIED":
            return
        namespace, name = object_key(obj)
        for reference in (obj.get("metadata") or {}).get("ownerReferences") or ():
            uid = reference.get("uid")
            if not uid:
                continue
            dependents = self._dependents.setdefault(uid, {})
            if event == "ADDED":
                dependents[(kind, namespace, name)] = None
            else:
                dependents.pop((kind, namespace, name), None)
                if not dependents:
                    del self._dependents[uid]

    def _collect_garbage(self, event: str, obj: Manifest, old: Manifest | None) -> None:
        """A deleted TrainingJob takes its children along.

        Children name the job in ``ownerReferences`` (the JobParser sets them), so
        they go even if no Controller hears of the deletion.
        """
        if event != "DELETED":
            return
        uid = (obj.get("metadata") or {}).get("uid")
        for kind, namespace, name in list(self._dependents.get(uid, {})):
            with contextlib.suppress(NotFoundError):
                self.store.delete(kind, namespace, name)

    # -- reconciling -----------------------------------------------------------------------
    def _mark_dirty(self, key: OwnerKey) -> None:
        self._dirty[key] = None
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.clock.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        while self._dirty:
            dirty, self._dirty = self._dirty, {}
            for key in dirty:
                self._reconcile(key)

    def _reconcile(self, key: OwnerKey) -> None:
        """Make an owner's active pods match its desired count (create or delete)."""
        kind, namespace, name = key
        obj = self.store.peek(kind, namespace, name)
        owner = self.owners.get(key)
        if owner is None:
            return
        if obj is None:  # owner deleted: its pods go too (cascading deletion)
            for pod in list(owner.pods.values()):
                self.pods.delete(pod)
            if not owner.pods:
                del self.owners[key]
            return
        want, owner.condition = wanted_pods(kind, obj["spec"], owner)
        diff = want - owner.active
        if diff > 0 and owner.backoff_until > self.clock.now():
            if owner.backoff_timer is None:  # come back when the back-off ends
                owner.backoff_timer = self.clock.call_at(
                    owner.backoff_until, self._backoff_over, key
                )
            return
        if diff > 0:
            self._refresh_template(obj, owner)
            for _ in range(diff):
                manifest = pod_from_template(key, obj, owner.created)
                owner.created += 1
                self.pods.create(manifest, owner.resources, key)
        elif diff < 0:
            active = [pod for pod in owner.pods.values() if not pod.terminating]
            active.sort(key=PodRecord.deletion_rank)
            for pod in active[:-diff]:
                self.pods.delete(pod)

    def _backoff_over(self, key: OwnerKey) -> None:
        owner = self.owners.get(key)
        if owner is not None:
            owner.backoff_timer = None
            self._mark_dirty(key)

    @staticmethod
    def _refresh_template(obj: Manifest, owner: OwnerPods) -> None:
        generation = obj["metadata"]["generation"]
        if owner.generation != generation:
            template = obj["spec"].get("template") or {}
            owner.resources = pod_request({"spec": template.get("spec") or {}})
            owner.generation = generation

    # -- pod exits ---------------------------------------------------------------------------
    def _pod_exited(self, pod: PodRecord, code: int) -> None:
        if pod.owner is None:
            return
        owner = self.owners.get(pod.owner)
        if owner is None:
            return
        owner.count(pod, -1)
        del owner.pods[pod.uid]
        if code == 0:
            if not pod.terminating:
                owner.succeeded += 1
                owner.crash_streak = 0
        elif not pod.terminating or pod.owner[0] == "Job":
            self._count_failure(pod, owner, code)
        self._mark_dirty(pod.owner)

    def _count_failure(self, pod: PodRecord, owner: OwnerPods, code: int) -> None:
        """A failed pod: ignored, counted (with a back-off before its replacement) or fatal."""
        assert pod.owner is not None
        kind, namespace, name = pod.owner
        obj = self.store.peek(kind, namespace, name)
        if obj is None or owner.condition is not None:
            return  # the owner is gone or the Job already ended: leftovers do not count
        action, rule = (
            pod_failure_action(obj["spec"], pod.manifest) if kind == "Job" else ("Count", None)
        )
        if action == IGNORE:
            return
        owner.failed += 1
        owner.last_failure = _failure_line(pod, code)
        if action == FAIL_JOB:
            owner.condition = FAILED
            owner.failure_reason = POD_FAILURE_POLICY
            owner.failure_condition_message = (
                f"Pod {pod.namespace}/{pod.name} failed with exit code {code} "
                f"matching FailJob rule at index {rule}"
            )
        ran = self.clock.now() - pod.running_at if pod.running_at is not None else 0.0
        owner.crash_streak = 1 if ran >= BACKOFF_RESET_S else owner.crash_streak + 1
        owner.backoff_until = self.clock.now() + crash_backoff_s(
            owner.crash_streak, self.backoff_base_s, self.backoff_max_s
        )


def _failure_line(pod: PodRecord, code: int) -> str:
    """``<pod> (exit <code>): <last line of its termination message>``."""
    message = ""
    for container in pod.manifest["status"].get("containerStatuses") or ():
        message = container["state"]["terminated"].get("message", "") or message
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    why = f": {lines[-1][:LAST_FAILURE_CHARS]}" if lines else ""  # the error is the last line
    return f"{pod.name} (exit {code}){why}"

