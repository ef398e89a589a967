"""The in-memory cluster state a Kubernetes Cluster adapter keeps from watches.

Why: `inquiry_resource` and `job_pods` run every autoscaler tick. Pods and
nodes arrive as watch events; each event updates an O(1) `ResourceLedger`
(requests, limits, per-node room) and a small per-job index of trainer pods,
then the full object is dropped. A tick reads the running sums instead of
listing and summing 150,000 pods.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from edl.accounting import (
    TERMINAL_PHASES,
    ClusterResource,
    PodRequestError,
    PodResources,
    ResourceLedger,
    is_trainer_pod,
    pod_request,
)
from edl.accounting.ledger import held_node, pending_pod_resources
from edl.accounting.quota import quota_room
from edl.api.names import LABEL_JOB, LABEL_ROLE, ROLE_TRAINER, JobKey, object_key
from edl.cluster import port
from edl.cluster.port import JobPods
from edl.kube.trainer_index import TrainerPodIndex

log = logging.getLogger(__name__)

REQUEST_CACHE_SIZE = 4096

PodKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class TrainerPodState:
    """What `job_pods` needs of one cached trainer pod."""

    phase: str
    leaving: bool  # deletionTimestamp set
    bound: bool  # spec.nodeName set
    node: str = ""  # spec.nodeName


def _trainer_job(obj: Mapping[str, Any]) -> JobKey | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(LABEL_ROLE) != ROLE_TRAINER or LABEL_JOB not in labels:
        return None
    return meta.get("namespace") or "default", labels[LABEL_JOB]


# the long-running roles whose live pods `role_pods` counts (the master and pserver
# ReplicaSets'): the Controller asks a ReplicaSet why only when its pods are missing
COUNTED_ROLES = frozenset({"master", "pserver"})
RoleKey = tuple[str, str, str]  # namespace, TrainingJob, role


def _role_key(obj: Mapping[str, Any], phase: str) -> RoleKey | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    role = labels.get(LABEL_ROLE)
    if role not in COUNTED_ROLES or LABEL_JOB not in labels:
        return None
    if phase in TERMINAL_PHASES or meta.get("deletionTimestamp"):
        return None
    return meta.get("namespace") or "default", labels[LABEL_JOB], role


class ClusterState:
    """Nodes and pods as running sums; fed by two reflectors (see `reflector.Store`)."""

    def __init__(self) -> None:
        self.ledger = ResourceLedger()
        self._pods: set[PodKey] = set()
        self._nodes: set[str] = set()
        self._trainers: dict[JobKey, dict[PodKey, TrainerPodState]] = {}
        self._trainer_of: dict[PodKey, JobKey] = {}
        self._role_of: dict[PodKey, RoleKey] = {}
        self._role_counts: Counter[RoleKey] = Counter()
        self.bad_pods = 0
        self._unschedulable: set[PodKey] = set()
        self._request_cache: dict[str, PodResources] = {}
        self._unschedulable_callbacks: list[Callable[[], None]] = []
        self.trainer_index = TrainerPodIndex()  # for edl's trainer controller

    # -- pods ------------------------------------------------------------------------

    def set_pod(self, pod: Mapping[str, Any]) -> None:
        key = object_key(pod)
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        try:
            if phase in TERMINAL_PHASES:  # finished pods hold no resources
                self.ledger.remove_pod(*key)
            else:
                node, trainer = held_node(pod), is_trainer_pod(pod)
                resources = self._requests(pod)
                if not node and not trainer:  # a waiting pod: the policy places it
                    resources = pending_pod_resources(pod, resources)
                self.ledger.set_pod_resources(
                    key[0], key[1], resources, node=node, trainer=trainer
                )
        except PodRequestError as error:
            # A pod we cannot account for must not stop the controller; leave it out.
            log.warning("ignoring pod %s/%s in accounting: %s", *key, error)
            self.ledger.remove_pod(*key)
            self.bad_pods += 1
        if phase in TERMINAL_PHASES:
            self._pods.discard(key)
        else:
            self._pods.add(key)
        self._index_trainer(key, pod, phase)
        self._index_role(key, _role_key(pod, phase))
        self.trainer_index.set(key, pod)
        self._note_scheduling(key, pod, phase)

    def _requests(self, pod: Mapping[str, Any]) -> PodResources:
        """`pod_request`, memoised by the pod's resource fields.

        Pods of one ReplicaSet/Job share their requests, so a cluster has few
        distinct shapes; parsing quantities exactly is the costliest part of an
        event, and this makes it once per shape instead of once per event.
        """
        spec = pod.get("spec") or {}
        init = spec.get("initContainers") or ()
        signature = repr((
            [(c.get("resources"), c.get("restartPolicy")) for c in init],
            [c.get("resources") for c in spec.get("containers") or ()],
            spec.get("overhead"),
        ))
        cached = self._request_cache.get(signature)
        if cached is None:
            cached = pod_request(pod)
            if len(self._request_cache) >= REQUEST_CACHE_SIZE:
                self._request_cache.clear()
            self._request_cache[signature] = cached
        return cached

    def remove_pod(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self.ledger.remove_pod(namespace, name)
        self._pods.discard(key)
        self._unindex_trainer(key)
        self._index_role(key, None)
        self.trainer_index.remove(key)
        self._unschedulable.discard(key)

    def watch_unschedulable(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback()` whenever a pod newly reports PodScheduled=False/Unschedulable."""
        self._unschedulable_callbacks.append(callback)

        def unsubscribe() -> None:
            if callback in self._unschedulable_callbacks:
                self._unschedulable_callbacks.remove(callback)

        return unsubscribe

    def _note_scheduling(self, key: PodKey, pod: Mapping[str, Any], phase: str) -> None:
        conditions = (pod.get("status") or {}).get("conditions") or ()
        stuck = phase == "Pending" and any(
            c.get("type") == "PodScheduled" and c.get("status") == "False"
            and c.get("reason") == "Unschedulable" for c in conditions)
        if not stuck:
            self._unschedulable.discard(key)
            return
        if key in self._unschedulable:
            return
        self._unschedulable.add(key)
        for callback in list(self._unschedulable_callbacks):
            callback()

    def _index_trainer(self, key: PodKey, pod: Mapping[str, Any], phase: str) -> None:
        job = _trainer_job(pod)
        if job is None or phase in TERMINAL_PHASES:
            self._unindex_trainer(key)
            return
        leaving = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        node = (pod.get("spec") or {}).get("nodeName") or ""
        bound = bool(node)
        previous = self._trainer_of.get(key)
        if previous is not None and previous != job:
            self._unindex_trainer(key)
        self._trainers.setdefault(job, {})[key] = TrainerPodState(phase, leaving, bound, node)
        self._trainer_of[key] = job

    def _index_role(self, key: PodKey, role: RoleKey | None) -> None:
        before = self._role_of.pop(key, None)
        if before is not None:
            self._role_counts[before] -= 1
            if not self._role_counts[before]:
                del self._role_counts[before]
        if role is not None:
            self._role_of[key] = role
            self._role_counts[role] += 1

    def _unindex_trainer(self, key: PodKey) -> None:
        job = self._trainer_of.pop(key, None)
        if job is None:
            return
        pods = self._trainers.get(job)
        if pods is not None:
            pods.pop(key, None)
            if not pods:
                del self._trainers[job]

    def replace_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list: (re)add every pod, then forget those that were not listed."""
        store = PodStore(self)
        store.begin_replace()
        for pod in pods:
            store.apply("ADDED", dict(pod))
        store.end_replace()

    def forget_pods_except(self, listed: set[PodKey]) -> None:
        for key in self._pods - listed:
            self.remove_pod(*key)
        for key in set(self._trainer_of) - listed:
            self._unindex_trainer(key)
        for key in set(self._role_of) - listed:
            self._index_role(key, None)
        for key in self.trainer_index.keys() - listed:
            self.trainer_index.remove(key)

    # -- nodes -----------------------------------------------------------------------

    def set_node(self, node: Mapping[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name") or ""
        try:
            self.ledger.set_node_object(node)
            self._nodes.add(name)
        except ValueError as error:
            log.warning("ignoring node %s in accounting: %s", name, error)
            self.remove_node(name)

    def remove_node(self, name: str) -> None:
        self.ledger.remove_node(name)
        self._nodes.discard(name)

    def replace_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        store = NodeStore(self)
        store.begin_replace()
        for node in nodes:
            store.apply("ADDED", dict(node))
        store.end_replace()

    def forget_nodes_except(self, listed: set[str]) -> None:
        for name in self._nodes - listed:
            self.remove_node(name)

    # -- queries ---------------------------------------------------------------------

    def resources(self) -> ClusterResource:
        return self.ledger.snapshot()

    def job_pods(self, namespace: str, name: str) -> JobPods:
        """Trainer pods of a job: leaving (being deleted) and finished pods do not count
        in total/running/pending; `terminating` counts the leaving ones."""
        running = pending = unscheduled = terminating = 0
        for pod in self._trainers.get((namespace, name), {}).values():
            if pod.leaving:
                terminating += 1
            elif pod.phase == "Running":
                running += 1
            elif pod.phase == "Pending":
                pending += 1
                unscheduled += not pod.bound
        return JobPods(total=running + pending, running=running, pending=pending,
                       unscheduled=unscheduled, terminating=terminating)

    def role_pods(self, namespace: str, name: str, role: str) -> int:
        """How many live (unfinished, not being deleted) pods of a job's master or
        pservers the cache holds."""
        return self._role_counts.get((namespace, name, role), 0)

    def trainer_pods(
        self, namespace: str, name: str, leaving: bool = False
    ) -> list[port.TrainerPod]:
        """A job's unfinished trainer pods with their node; leaving ones only if asked."""
        return [
            port.TrainerPod(key[1], pod.node, pod.leaving)
            for key, pod in self._trainers.get((namespace, name), {}).items()
            if leaving or not pod.leaving
        ]

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    @property
    def node_count(self) -> int:
        return len(self._nodes)


class PodStore:
    """`reflector.Store` for pods, writing into a ClusterState."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._listed: set[PodKey] | None = None

    def begin_replace(self) -> None:
        self._listed = set()

    def end_replace(self) -> None:
        if self._listed is not None:
            self.state.forget_pods_except(self._listed)
        self._listed = None

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.state.remove_pod(*object_key(obj))
        elif event_type in {"ADDED", "MODIFIED"}:
            self.state.set_pod(obj)
            if self._listed is not None:
                self._listed.add(object_key(obj))


class NodeStore:
    """`reflector.Store` for nodes, writing into a ClusterState."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._listed: set[str] | None = None

    def begin_replace(self) -> None:
        self._listed = set()

    def end_replace(self) -> None:
        if self._listed is not None:
            self.state.forget_nodes_except(self._listed)
        self._listed = None

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name") or ""
        if event_type == "DELETED":
            self.state.remove_node(name)
        elif event_type in {"ADDED", "MODIFIED"}:
            self.state.set_node(obj)
            if self._listed is not None:
                self._listed.add(name)


class QuotaStore:
    """`reflector.Store` for ResourceQuotas, writing into a ClusterState's ledger.

    Why: a job must not be planned past what its namespace's quotas leave (the API
    server would refuse the pods, 403 "exceeded quota"); the quota controller keeps
    `status.used` current, so the cache holds exactly what admission checks against.
    """

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._known: set[tuple[str, str]] = set()
        self._listed: set[tuple[str, str]] | None = None

    def begin_replace(self) -> None:
        self._listed = set()

    def end_replace(self) -> None:
        if self._listed is not None:
            for key in self._known - self._listed:
                self.state.ledger.remove_quota(*key)
            self._known = set(self._listed)
        self._listed = None

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        if event_type == "DELETED":
            self.state.ledger.remove_quota(*key)
            self._known.discard(key)
        elif event_type in {"ADDED", "MODIFIED"}:
            try:
                self.state.ledger.set_quota(quota_room(obj))
            except ValueError as error:  # a quota it cannot read must not stop the controller
                log.warning("ignoring resourcequota %s/%s: %s", *key, error)
                return
            self._known.add(key)
            if self._listed is not None:
                self._listed.add(key)
