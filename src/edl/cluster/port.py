"""The `Cluster` port, its optional capabilities, and the two plugs of the in-process cluster.

* the Controller and Autoscaler use **only** `Cluster` — so Kubernetes
  (`edl.kube`), simulation and local runs (`edl.cluster.inproc`)
  are interchangeable behind it;
* the in-process control plane takes a `Clock` (virtual time for `edl simulate`,
  real time for `edl run`) and a `PodRunner` (simulated pods, or real
  processes on this machine).

Objects cross this boundary as plain dicts in Kubernetes manifest shape
(``apiVersion``, ``kind``, ``metadata``, ``spec``, ``status``), exactly what
`edl.jobparser.JobParser` emits. A dict returned by a `Cluster` method is the
caller's own copy: mutate it freely and hand it back to an update method.

Concurrency is optimistic, as in the Kubernetes API server: every stored object
carries ``metadata.resourceVersion``; an update whose resourceVersion is not the
current one raises `ConflictError` and the caller re-reads and retries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    from edl.accounting import ClusterResource
    from edl.api.trainingjob import TrainingJob

Manifest = dict[str, Any]
"""A Kubernetes-shaped object as a plain dict (the caller's own copy)."""

Unsubscribe = Callable[[], None]
"""Returned by the ``watch_*`` methods; call it to stop receiving events."""


# --------------------------------------------------------------------------- errors


class ClusterError(Exception):
    """Base of the errors a `Cluster` raises for API-level failures."""

    def __init__(
        self, kind: str, namespace: str, name: str, detail: str = "", status: int | None = None
    ) -> None:
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.detail = detail
        self.status = status  # the HTTP status, where an API server answered
        where = f"{kind} {namespace}/{name}"
        super().__init__(f"{where}: {detail}" if detail else where)


def is_permanent(error: ClusterError) -> bool:
    """An error retrying cannot fix: an invalid object (400, 422) or a refusal (403)
    that is not a quota's (``exceeded quota``: freed quota lets a retry through).

    Everything else (5xx after the client's own retries, a webhook timeout, 429, a
    dropped connection) is transient.
    """
    if error.status in (400, 422):
        return True
    return error.status == 403 and "exceeded quota" not in error.detail


class ConflictError(ClusterError):
    """An update carried a stale ``metadata.resourceVersion`` (HTTP 409); re-read and retry."""


class NotFoundError(ClusterError):
    """The object does not exist (HTTP 404)."""


class NotLeaderError(ClusterError):
    """A write refused before it was sent: this replica no longer holds the leader Lease."""


class InvalidError(ClusterError):
    """The API server's validation refused the object or its status (HTTP 422)."""


class AlreadyExistsError(ClusterError):
    """A create named an object that already exists (HTTP 409 AlreadyExists)."""


# --------------------------------------------------------------------------- Cluster


class JobPods(NamedTuple):
    """Trainer pods of one TrainingJob, as PaddlePaddle EDL's ``JobPods`` counted them.

    Pods that are being deleted (``metadata.deletionTimestamp`` set) or have
    finished (Succeeded/Failed) are not in total/running/pending: they are
    leaving and the Autoscaler must not plan with them as members.

    ``unscheduled`` lets a policy tell pods that already hold node room from
    pods that still need it; ``terminating`` counts the pods being deleted, which
    Kubernetes still reports as Running and which hold their node room until
    they exit. The Autoscaler adds them back into `edl.policy.JobView`
    ``total``/``running`` (the original's counting), so a policy can credit
    room already on its way. An adapter that cannot tell leaves either None.
    Read the fields by name: the tuple may grow.
    """

    total: int  # running + pending
    running: int  # phase Running
    pending: int  # phase Pending (unscheduled, or bound and still starting)
    unscheduled: int | None = None  # pending ones not yet bound to a node; None = unknown
    terminating: int | None = None  # being deleted, still holding node room; None = unknown


class TrainingJobHandler(Protocol):
    """Receives TrainingJob events; the `Controller` implements it.

    The dict is the TrainingJob object as stored (manifest shape, with
    ``metadata.resourceVersion``). Handlers are awaited one event at a time, in
    order, per cluster.
    """

    async def on_add(self, obj: Manifest) -> None: ...
    async def on_update(self, obj: Manifest) -> None: ...
    async def on_del(self, obj: Manifest) -> None: ...


@runtime_checkable
class Cluster(Protocol):
    """What the Controller and Autoscaler need from a cluster (PaddlePaddle EDL's ``Cluster``).

    Names follow PaddlePaddle EDL's. "Trainer job" means the batch/v1 Job that runs a
    TrainingJob's trainers (``<job>-trainer``); its ``spec.parallelism`` is
    the knob the Autoscaler turns.
    """

    # -- children of a TrainingJob -------------------------------------------------
    async def create_job(self, job: Manifest) -> Manifest:
        """Create a batch/v1 Job; returns the stored object.

        For every ``create_*``: a child that already exists is never duplicated. The
        in-process cluster raises `AlreadyExistsError`; Kubernetes applies the manifest
        (server-side apply), converging the existing object. Callers accept both.
        """
        ...

    async def create_replica_set(self, replica_set: Manifest) -> Manifest:
        """Create an apps/v1 ReplicaSet; returns the stored object. `AlreadyExistsError`."""
        ...

    async def get_replica_set(self, namespace: str, name: str) -> Manifest:
        """Read a ReplicaSet. `NotFoundError` if missing."""
        ...

    async def delete_replica_set(self, namespace: str, name: str) -> None:
        """Delete a ReplicaSet and (cascading) its pods. `NotFoundError` if missing."""
        ...

    async def create_service(self, service: Manifest) -> Manifest:
        """Create a v1 Service (the job's master Service). `AlreadyExistsError`."""
        ...

    async def delete_service(self, namespace: str, name: str) -> None:
        """Delete a Service. `NotFoundError` if missing."""
        ...

    async def get_trainer_job(self, job: TrainingJob) -> Manifest:
        """Read the trainer Job of a TrainingJob (``<name>-trainer``). `NotFoundError`."""
        ...

    async def get_trainer_job_by_name(self, namespace: str, name: str) -> Manifest:
        """Read a batch/v1 Job by its own name. `NotFoundError`."""
        ...

    async def update_trainer_job(self, job: Manifest) -> Manifest:
        """Replace a batch/v1 Job (this is how parallelism changes).

        Raises `ConflictError` if ``metadata.resourceVersion`` is stale and
        `NotFoundError` if the Job is gone. Returns the stored object.
        """
        ...

    async def delete_trainer_job(self, namespace: str, name: str) -> None:
        """Delete a batch/v1 Job and (cascading) its pods. `NotFoundError` if missing."""
        ...

    # -- observation -------------------------------------------------------------------
    async def job_pods(self, job: TrainingJob) -> JobPods:
        """Count the trainer pods of a TrainingJob (see `JobPods`)."""
        ...

    async def inquiry_resource(self) -> ClusterResource:
        """Totals, requests and per-node room of the cluster (`edl.accounting.ClusterResource`).

        Same meaning as ``edl.accounting.inquire_resource(nodes, pods)`` over
        the current nodes and the pods that are not Succeeded/Failed.
        """
        ...

    # -- TrainingJob objects -------------------------------------------------------------
    async def update_training_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        """Replace the ``status`` of a TrainingJob (status subresource: no version check).

        `NotFoundError` if the TrainingJob is gone (a deleted job's status is moot).
        """
        ...

    def watch_training_jobs(self, handler: TrainingJobHandler) -> Unsubscribe:
        """Deliver TrainingJob add/update/delete events to ``handler``.

        Jobs that already exist are delivered as ``on_add`` first (list, then
        watch — as an informer does).
        """
        ...

    def watch_unschedulable(self, callback: Callable[[], None]) -> Unsubscribe:
        """Call ``callback()`` (synchronously, keep it cheap) when pods fail to schedule.

        Lets the Autoscaler free room for a waiting service at once instead of
        on its next periodic tick. Fire it when a pod first fails to fit and
        when a pod that is not a trainer still fails after room was freed (the
        freed room was not enough or not where it was needed); trainers that
        keep waiting are the Autoscaler's own plan and need no alarm. The
        in-process cluster calls it at most once per scheduling pass.
        """
        ...


class TrainerPod(NamedTuple):
    """One trainer pod of a TrainingJob, the node it is bound to ("" if none), and
    whether it is being deleted (listed only when asked for)."""

    name: str
    node: str
    leaving: bool = False


@runtime_checkable
class VictimScaling(Protocol):
    """Optional `Cluster` capability: shrink a trainer Job choosing which pods leave.

    Without it the Job controller picks (Kubernetes: pending pods, then the newest),
    which under a spreading scheduler strands freed room in holes no pod fits.
    The Autoscaler uses it when a `edl.policy.Decision` names ``victim_nodes`` and
    falls back to `Cluster.update_trainer_job` on clusters that lack it.
    """

    async def trainer_pods(self, job: TrainingJob, leaving: bool = False) -> list[TrainerPod]:
        """The job's trainer pods that have not finished and are not being deleted
        (with ``leaving``, those being deleted too, flagged: they still hold room)."""
        ...

    async def scale_trainer_job(self, job: Manifest, victims: list[str]) -> Manifest:
        """Set ``spec.parallelism`` (guarded by resourceVersion, as `update_trainer_job`)
        and delete the named trainer pods, so that the Job controller removes these
        pods rather than its own choice. `ConflictError` leaves every pod in place."""
        ...


@runtime_checkable
class ServerScaling(Protocol):
    """Optional `Cluster` capability: set a ReplicaSet's replicas (the Controller stops
    the master and pservers of a finished job with 0)."""

    async def scale_replica_set(self, namespace: str, name: str, replicas: int) -> None:
        """`NotFoundError` if it does not exist."""
        ...


@runtime_checkable
class TrainerFailures(Protocol):
    """Optional `Cluster` capability: the error of a job's last failed trainer.

    The Controller puts it in a Failed job's status message, so the user reads
    why without looking for the pod. Clusters that keep no termination messages
    lack it.
    """

    async def last_trainer_failure(self, job: TrainingJob) -> str:
        """``<pod> (exit <code>): <last line of its message>`` of the last counted
        trainer failure; "" if none."""
        ...


@runtime_checkable
class ManagedTrainers(Protocol):
    """Optional `Cluster` capability: edl's controller runs the trainer Job's pods itself.

    A trainer Job with ``spec.managedBy: edl.dev/trainer-controller`` is left alone
    by the cluster's Job controller; the Controller (`edl.control.trainer_controller`)
    creates, deletes and counts its pods through these calls, so a scale-up is never
    held back by the built-in controller's failure back-off (docs/architecture.md).
    A cluster may also be `CrashBackoff`: its own delay between crash replacements
    (default 10 s doubling to 10 min; local runs shorten it).
    Pod manifests come with their times (``creationTimestamp``, ``startTime``,
    ``deletionTimestamp``, a terminated state's ``finishedAt``) as seconds on
    ``trainer_clock()``.
    """

    def trainer_clock(self) -> float:
        """Now, in the seconds of the pod times below."""
        ...

    def trainer_pod_manifests(self, namespace: str, job: str) -> list[Manifest]:
        """TrainingJob ``job``'s trainer pods: live ones, and finished ones not yet
        removed with `delete_trainer_pod`."""
        ...

    def trainer_pod_jobs(self) -> list[tuple[str, str]]:
        """(namespace, TrainingJob) of every job with a trainer pod in that view."""
        ...

    async def create_trainer_pod(self, pod: Manifest) -> None:
        """Create a trainer pod (owned by its trainer Job; `AlreadyExistsError`)."""
        ...

    async def delete_trainer_pod(self, namespace: str, name: str) -> None:
        """Delete a trainer pod (gracefully if it runs; a finished one is removed)."""
        ...

    async def update_trainer_job_status(
        self, namespace: str, name: str, status: Mapping[str, Any],
        expected: Mapping[str, Any] | None = None,
    ) -> None:
        """Write a managed trainer Job's status (the built-in controller's fields), as
        the API server validates it; with ``expected``, only if the stored status is
        still that one (`ConflictError` otherwise: someone wrote it since it was read).
        A field set to None is removed."""
        ...

    async def mark_trainer_pod_counted(self, namespace: str, name: str) -> None:
        """Mark a finished trainer pod as counted in its Job's status (annotation
        ``edl.dev/counted``) and remove its tracking finalizers (edl's and
        kube-controller-manager's) in the same write; also for a pod with nothing to
        count (ignored, orphaned, of a finished Job), whose finalizer just goes."""
        ...

    async def post_trainer_event(self, namespace: str, job: str, reason: str,
                                 message: str) -> None:
        """A Warning Event on TrainingJob ``job`` about its trainer pods."""
        ...

    def watch_trainers(self, callback: Callable[[str, str], None]) -> Unsubscribe:
        """Call ``callback(namespace, training job)`` when one of its trainer pods or its
        trainer Job changed."""
        ...


# --------------------------------------------------------------------------- plugs


class Timer(Protocol):
    """A scheduled callback (``asyncio.TimerHandle`` satisfies this)."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Time as the in-process control plane sees it: virtual or real.

    Implementations: `edl.cluster.inproc.clock.AsyncioClock` (the running
    event loop's clock: real time on a normal loop) and
    `edl.cluster.inproc.clock.VirtualClock` (an event loop whose time jumps to
    the next timer whenever every task is waiting, so ordinary asyncio code —
    the Controller's and Autoscaler's included — runs unchanged on virtual time).
    """

    def now(self) -> float:
        """Seconds since the clock's epoch (0.0 at construction)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend the calling task for ``seconds`` of this clock's time."""
        ...

    def call_soon(self, callback: Callable[..., object], *args: Any) -> Timer:
        """Run ``callback(*args)`` on the event loop as soon as it is free."""
        ...

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Timer:
        """Run ``callback(*args)`` on the event loop after ``delay`` seconds."""
        ...

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Timer:
        """Run ``callback(*args)`` at time ``when`` (same epoch as `now`)."""
        ...


class PodRunner(Protocol):
    """Runs the containers of pods the scheduler has bound to a node.

    Implementations: `edl.cluster.inproc.simulated_pods.SimulatedPodRunner` (start
    latency and termination time drawn from distributions) and, for
    ``edl run``, a pod runner that starts real processes.

    Contract (callbacks are plain functions, call them on the event loop thread):

    * `start` is called once per pod, after binding (``spec.nodeName`` set).
      The pod runner calls ``on_running()`` at most once when the containers run,
      and ``on_exit(code)`` exactly once when they have all stopped
      (0 = success -> phase Succeeded, anything else -> Failed).
    * `stop` asks the pod to end: SIGTERM now, SIGKILL once ``grace_period_s``
      has passed. It may come before ``on_running`` and must still lead to
      exactly one ``on_exit``. Until ``on_exit``, the pod keeps its phase
      and its node's resources, as a terminating pod does in Kubernetes.
    * Neither method blocks; a pod runner schedules work on the event loop.
    """

    def start(
        self,
        pod: Manifest,
        on_running: Callable[[], None],
        on_exit: Callable[[int], None],
    ) -> None: ...

    def stop(self, pod: Manifest, grace_period_s: float) -> None: ...


@runtime_checkable
class CrashBackoff(Protocol):
    """Optional `ManagedTrainers` setting: ``(first delay, cap)`` in seconds between a
    crashed trainer and its replacement (doubling per crash in a row). Local runs and
    `edl controller --crash-backoff` shorten it; without it, 10 s to 10 min."""

    crash_backoff_s: tuple[float, float]


@runtime_checkable
class TerminationMessages(Protocol):
    """Optional `PodRunner` capability: what a pod's container said as it failed
    (Kubernetes' ``terminationMessage``: the tail of its log)."""

    def termination_message(self, pod_name: str) -> str | None: ...
