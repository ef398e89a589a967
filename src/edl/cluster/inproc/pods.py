"""Pods of the in-process control plane, and the per-owner counters kept beside them.

A pod is a `PodRecord` (slots, integer resources parsed once) holding its
manifest. Everything the Autoscaler and the simulator ask about pods is answered
from counters updated on each transition, never by scanning pods.

States (Kubernetes phases plus deletion):

    unbound  — phase Pending, not yet on a node (waits in the scheduling queue)
    starting — phase Pending, bound to a node, containers starting
    running  — phase Running
    any of them with ``terminating`` — deleted, still on its node until it exits
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edl.accounting import PodResources
from edl.accounting.eligibility import constraints_of
from edl.api.names import LABEL_JOB, LABEL_ROLE
from edl.cluster.inproc.affinity import PreferredTerm
from edl.cluster.port import Manifest

OwnerKey = tuple[str, str, str]  # (kind, namespace, name)

PENDING = "Pending"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"


class PodRecord:
    """One pod: identity, parsed resources, state, and its manifest (kept in sync)."""

    __slots__ = (
        "constraints",
        "counted",
        "created_at",
        "job",
        "manifest",
        "name",
        "namespace",
        "node",
        "nominated",
        "owner",
        "phase",
        "preferred",
        "priority",
        "resources",
        "role",
        "running_at",
        "seq",
        "terminating",
        "uid",
        "unschedulable",
        "waiting_for",
    )

    def __init__(
        self,
        manifest: Manifest,
        resources: PodResources,
        owner: OwnerKey | None,
        seq: int,
        now: float,
        preferred: tuple[PreferredTerm, ...] = (),
    ) -> None:
        metadata = manifest["metadata"]
        labels = metadata.get("labels") or {}
        self.manifest = manifest
        self.uid: str = metadata["uid"]
        self.namespace: str = metadata["namespace"]
        self.name: str = metadata["name"]
        self.role: str = labels.get(LABEL_ROLE, "")
        self.job: str = labels.get(LABEL_JOB, "")
        self.owner = owner
        self.resources = resources
        self.preferred = preferred  # preferred node-affinity terms (`affinity.py`), parsed once
        spec = manifest.get("spec") or {}
        self.constraints = constraints_of(spec)  # taints it tolerates, nodes it selects
        priority = spec.get("priority")
        self.priority: int = priority if isinstance(priority, int) else 0
        self.nominated = ""  # the node preemption holds room on for it
        self.waiting_for: set[str] = set()  # uids of its victims still leaving
        self.seq = seq  # creation order: newer pods have larger seq
        self.created_at = now
        self.running_at: float | None = None
        self.node: str | None = None
        self.phase = PENDING
        self.terminating = False
        self.unschedulable = False
        self.counted = False  # a Job has already counted this pod as failed (at its deletion)

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


@dataclass
class OwnerPods:
    """The live pods of one owner (ReplicaSet, Deployment or Job) and their counts.

    Counts exclude terminating pods except ``terminating`` itself.
    """

    pods: dict[str, PodRecord] = field(default_factory=dict)  # uid -> pod, creation order
    unbound: int = 0
    starting: int = 0
    running: int = 0
    terminating: int = 0
    succeeded: int = 0
    failed: int = 0
    crash_streak: int = 0  # ReplicaSet/Deployment: failures in a row (CrashLoopBackOff)
    backoff_until: float = float("-inf")  # ReplicaSet/Deployment: no replacement before this
    # a Job's back-off record (backoff_utils.go): failed pods since the last success
    failures_after_success: int = 0
    last_failure_at: float | None = None
    backoff_timer: object = None
    created: int = 0  # pods ever created (names the next one)
    condition: str | None = None  # a Job's final condition: "Complete" or "Failed"
    failure_reason: str | None = None  # a FailJob rule's reason; else BackoffLimitExceeded
    failure_condition_message: str = ""  # the Failed condition's message, if not the default
    last_failure: str = ""  # "<pod>: <its termination message>" of the last counted failure
    # a Job managed by another controller: its finished pods, kept until that one removes them
    finished: dict[str, PodRecord] = field(default_factory=dict)
    generation: int = -1  # owner generation the cached template resources belong to
    resources: PodResources = field(default_factory=PodResources)

    @property
    def pending(self) -> int:
        return self.unbound + self.starting

    @property
    def active(self) -> int:
        return self.unbound + self.starting + self.running

    def count(self, pod: PodRecord, delta: int) -> None:
        """Add ``delta`` to the counter of the pod's current state."""
        if pod.terminating:
            self.terminating += delta
        elif pod.phase == RUNNING:
            self.running += delta
        elif pod.node is None:
            self.unbound += delta
        else:
            self.starting += delta
