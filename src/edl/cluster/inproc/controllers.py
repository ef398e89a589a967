"""`WorkloadControllers`: the ReplicaSet, Deployment and Job controllers and the garbage
collector of the in-process cluster.

They react to the object store and to pod deletions and exits, and keep each
owner's active pods at the count its rules want (`workloads`, pure functions),
following the upstream controllers (docs/fidelity.md has one row per rule):

* scaling down deletes pods in Kubernetes' order (`ranking`): the Job
  controller's ``activePodsForRemoval``, the ReplicaSet controller's ranking with
  ``controller.kubernetes.io/pod-deletion-cost``;
* a Job keeps the upstream back-off record: every failed pod (whatever its
  podFailurePolicy says) adds one to ``failuresAfterLastSuccess``, only a
  succeeded pod resets it, and no pod is created — replacement or scale-up —
  until 10 s doubled per failure (at most 10 min) have passed since the last
  failure. With ``podReplacementPolicy: Failed`` (the default with a
  podFailurePolicy) a terminating pod is neither replaced nor counted until it
  has failed; with ``TerminatingOrFailed`` it counts as failed when deleted;
* a Job counts failures against ``backoffLimit`` unless its ``podFailurePolicy``
  says ``Ignore``; ``FailJob`` fails it at once; past the limit it fails
  (``BackoffLimitExceeded``) and deletes its active pods. A Job without
  ``completions`` creates no pod once one has succeeded;
* a ReplicaSet/Deployment pod that exits by itself is replaced after a
  CrashLoopBackOff-like delay (10 s doubling, at most 5 min): the in-process
  stand-in for the kubelet restarting its container;
* a deleted owner takes its pods along, and a deleted TrainingJob its children
  (``ownerReferences``), as Kubernetes' garbage collector.
"""

from __future__ import annotations

import contextlib
import functools

from edl.accounting import pod_request
from edl.api.names import object_key
from edl.cluster.inproc.kubelet import PodLifecycle
from edl.cluster.inproc.pods import FAILED, OwnerKey, OwnerPods, PodRecord
from edl.cluster.inproc.ranking import job_removal_order, replica_set_removal_order
from edl.cluster.inproc.store import ObjectStore
from edl.cluster.inproc.workloads import (
    BACKOFF_RESET_S,
    FAIL_JOB,
    IGNORE,
    JOB_BACKOFF_BASE_S,
    JOB_BACKOFF_MAX_S,
    POD_FAILURE_POLICY,
    REPLACE_FAILED,
    crash_backoff_s,
    job_backoff_remaining_s,
    managed_elsewhere,
    owner_status,
    pod_failure_action,
    pod_from_template,
    pod_replacement_policy,
    wanted_pods,
)
from edl.cluster.port import Clock, ClusterError, Manifest, NotFoundError

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
        job_backoff_base_s: float = JOB_BACKOFF_BASE_S,
        job_backoff_max_s: float = JOB_BACKOFF_MAX_S,
    ) -> None:
        self.clock = clock
        self.store = store
        self.pods = pods
        self.owners = owners
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.job_backoff_base_s = job_backoff_base_s
        self.job_backoff_max_s = job_backoff_max_s
        self._dirty: dict[OwnerKey, None] = {}
        self._flush_scheduled = False
        # owner uid -> objects naming it in ownerReferences (garbage collection)
        self._dependents: dict[str, dict[tuple[str, str, str], None]] = {}
        pods.on_exit = self._pod_exited
        pods.on_delete = self._pod_deleted
        for kind in WORKLOAD_KINDS:
            store.listen(kind, functools.partial(self._workload_event, kind))
        for kind in (*WORKLOAD_KINDS, "Service"):
            store.listen(kind, functools.partial(self._track_owner, kind))
        store.listen(TRAINING_JOB, self._collect_garbage)

    def with_status(self, kind: str, obj: Manifest) -> Manifest:
        """Fill ``status`` from the live counters (the controllers' status writes)."""
        namespace, name = object_key(obj)
        if kind == "Job" and managed_elsewhere(obj.get("spec") or {}):
            obj.setdefault("status", {})  # written by its own controller
            return obj
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
            owner.succeeded = owner.failed = owner.failures_after_success = 0
            owner.last_failure_at = None
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
        if not isinstance(uid, str):
            return
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
            finished = list(owner.finished.values())
            owner.finished.clear()
            for pod in finished:
                self.pods.removed(pod)
            for pod in list(owner.pods.values()):
                self.pods.delete(pod)
            if not owner.pods:
                del self.owners[key]
            return
        spec = obj["spec"]
        if kind == "Job" and managed_elsewhere(spec):
            return  # its own controller creates and deletes its pods
        want, owner.condition = wanted_pods(kind, spec, owner)
        if kind == "Job" and owner.condition is not None:
            want = 0  # a finished Job deletes its active pods
        diff = want - owner.active
        if diff < 0:  # deletion takes precedence (manageJob / manageReplicas)
            active = [pod for pod in owner.pods.values() if not pod.terminating]
            if kind == "Job":
                order = job_removal_order(active)
            else:
                order = replica_set_removal_order(active, active, self.clock.now())
            for pod in order[:-diff]:
                self.pods.delete(pod)
            return
        if kind == "Job" and pod_replacement_policy(spec) == REPLACE_FAILED:
            diff -= owner.terminating  # terminating pods are replaced only once they failed
        if diff <= 0:
            return
        wait_until = self._creation_blocked_until(kind, owner)
        if wait_until > self.clock.now():
            if owner.backoff_timer is None:  # come back when the back-off ends
                owner.backoff_timer = self.clock.call_at(wait_until, self._backoff_over, key)
            return
        self._refresh_template(obj, owner)
        for _ in range(diff):
            manifest = pod_from_template(key, obj, owner.created)
            owner.created += 1
            try:
                self.pods.create(manifest, owner.resources, key)
            except ClusterError:  # refused (quota, PriorityClass): retried on the next sync
                break

    def _creation_blocked_until(self, kind: str, owner: OwnerPods) -> float:
        """When pods may be created: a Job's back-off record, a ReplicaSet's crash back-off."""
        if kind != "Job":
            return owner.backoff_until
        now = self.clock.now()
        return now + job_backoff_remaining_s(
            owner.failures_after_success, owner.last_failure_at, now,
            self.job_backoff_base_s, self.job_backoff_max_s,
        )

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

    # -- pod deletions and exits -----------------------------------------------------------
    def _pod_deleted(self, pod: PodRecord) -> None:
        """A Job with ``podReplacementPolicy: TerminatingOrFailed`` counts a deleted pod
        as failed at once (``isPodFailed``: deletionTimestamp set, not Succeeded)."""
        if pod.owner is None or pod.owner[0] != "Job":
            return
        obj = self.store.peek(*pod.owner)
        owner = self.owners.get(pod.owner)
        if obj is None or owner is None or managed_elsewhere(obj["spec"]):
            return
        if pod_replacement_policy(obj["spec"]) == REPLACE_FAILED:
            return
        pod.counted = True
        self._job_pod_failed(pod, owner, obj, None)
        self._mark_dirty(pod.owner)

    def _pod_exited(self, pod: PodRecord, code: int | None) -> None:
        if pod.owner is None:
            return
        owner = self.owners.get(pod.owner)
        if owner is None:
            return
        owner.count(pod, -1)
        del owner.pods[pod.uid]
        kind, namespace, name = pod.owner
        obj = self.store.peek(kind, namespace, name)
        if kind == "Job" and obj is not None and managed_elsewhere(obj["spec"]):
            if not pod.terminating:  # a deleted pod is gone once it exits
                owner.finished[pod.name] = pod  # kept, as Kubernetes keeps failed pods
            return
        if kind == "Job":
            if obj is not None and not pod.counted:
                if code == 0:
                    self._job_pod_succeeded(owner)
                else:
                    self._job_pod_failed(pod, owner, obj, code)
        elif code != 0 and not pod.terminating and obj is not None:
            self._restart_backoff(pod, owner, code)
        self._mark_dirty(pod.owner)

    def _job_pod_succeeded(self, owner: OwnerPods) -> None:
        owner.succeeded += 1
        owner.failures_after_success = 0  # newBackoffRecord: a success resets the record
        owner.last_failure_at = None

    def _job_pod_failed(
        self, pod: PodRecord, owner: OwnerPods, obj: Manifest, code: int | None
    ) -> None:
        """A failed Job pod: into the back-off record always; against backoffLimit unless
        the podFailurePolicy ignores it; ``FailJob`` ends the Job."""
        if owner.condition is not None:
            return  # the Job already ended: leftovers do not count
        owner.failures_after_success += 1
        owner.last_failure_at = self.clock.now()
        action, rule = pod_failure_action(obj["spec"], pod.manifest)
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

    def _restart_backoff(self, pod: PodRecord, owner: OwnerPods, code: int | None) -> None:
        """A ReplicaSet/Deployment pod that exited by itself: CrashLoopBackOff before the next."""
        owner.failed += 1
        owner.last_failure = _failure_line(pod, code)
        ran = self.clock.now() - pod.running_at if pod.running_at is not None else 0.0
        owner.crash_streak = 1 if ran >= BACKOFF_RESET_S else owner.crash_streak + 1
        owner.backoff_until = self.clock.now() + crash_backoff_s(
            owner.crash_streak, self.backoff_base_s, self.backoff_max_s
        )


def _failure_line(pod: PodRecord, code: int | None) -> str:
    """``<pod> (exit <code>): <last line of its termination message>``."""
    if code is None:
        return f"{pod.name} (deleted before its containers ran)"
    message = ""
    for container in pod.manifest["status"].get("containerStatuses") or ():
        terminated = (container.get("state") or {}).get("terminated") or {}
        message = terminated.get("message", "") or message
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    why = f": {lines[-1][:LAST_FAILURE_CHARS]}" if lines else ""  # the error is the last line
    return f"{pod.name} (exit {code}){why}"

