"""Incremental cluster accounting: add or remove one node or pod in O(1).

Adapters (the Kubernetes watcher, the in-process cluster) keep a ResourceLedger
up to date from events instead of re-summing every pod on every autoscaler tick;
`snapshot()` turns it into the immutable `ClusterResource` a policy reads
(O(nodes), it copies the per-node maps).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from edl.accounting.eligibility import NodeFacts, constraints_of, node_facts
from edl.accounting.request import PodRequestError, ResourceError, _quantity, field, pod_request
from edl.accounting.types import ClusterResource, Nodes, PodResources, QuotaRoom
from edl.api.names import LABEL_ROLE, ROLE_TRAINER
from edl.api.quantity import cpu_milli, gpu_count, memory_mega

__all__ = [
    "TERMINAL_PHASES",
    "NodeCapacity",
    "ResourceLedger",
    "is_trainer_pod",
    "node_capacity",
    "node_schedulable",
    "pending_pod_resources",
]

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_GPU_NAMES = ("nvidia.com/gpu", "alpha.kubernetes.io/nvidia-gpu")


def is_trainer_pod(pod: Mapping[str, Any]) -> bool:
    """True for a pod labelled `edl.dev/role: trainer` (every edl trainer pod is)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_ROLE) == ROLE_TRAINER


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """What a node offers to pods: its allocatable CPU milli, memory mega and GPUs."""

    cpu_milli: int
    memory_mega: int
    gpu: int = 0
    # every other resource it offers, `pods` included: (name, amount), sorted
    extended: tuple[tuple[str, int], ...] = ()


def node_capacity(node: Mapping[str, Any]) -> NodeCapacity:
    """A Node dict's `status.allocatable` (falls back to `status.capacity`, as kubelets do)."""
    name = field(node, "metadata", dict, "metadata").get("name", "?")
    where = f"node {name}: status"
    try:
        status = field(node, "status", dict, where)
        resources = field(status, "allocatable", dict, f"{where}.allocatable") or field(
            status, "capacity", dict, f"{where}.capacity"
        )
    except PodRequestError as error:
        raise ResourceError(str(error)) from None
    where = f"node {name}: status.allocatable"
    gpu_name = next((n for n in _GPU_NAMES if n in resources), None)
    extended = []
    for key, text in resources.items():
        if key in ("cpu", "memory") or key in _GPU_NAMES:
            continue
        try:
            amount = _quantity(text)
        except (ValueError, TypeError):
            raise ResourceError(f"{where}.{key}: invalid quantity {text!r}") from None
        extended.append((str(key), int(amount)))  # floor: a fraction of a unit is no unit
    return NodeCapacity(
        cpu_milli=cpu_milli(resources.get("cpu", 0), f"{where}.cpu"),
        memory_mega=memory_mega(resources.get("memory", 0), f"{where}.memory"),
        gpu=gpu_count(resources[gpu_name], f"{where}.{gpu_name}") if gpu_name else 0,
        extended=tuple(sorted(extended)),
    )


def node_schedulable(node: Mapping[str, Any]) -> bool:
    """Whether a new edl pod could be scheduled on this Node dict (pure).

    Not when it is cordoned (``spec.unschedulable``) or not Ready (a ``Ready``
    condition that is not "True"; a node that reports no conditions is taken as
    Ready). Taints do not close a node: which pods tolerate them is decided per pod
    (`eligibility.PodConstraints`), so a GPU pool tainted ``NoSchedule`` is room for
    the jobs that tolerate it and for no other.
    """
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    return all(
        condition.get("type") != "Ready" or condition.get("status") == "True"
        for condition in (node.get("status") or {}).get("conditions") or ()
    )


def pending_pod_resources(pod: Mapping[str, Any], resources: PodResources) -> PodResources:
    """`resources` plus what a policy needs to place the pod: constraints and priority."""
    spec = pod.get("spec") or {}
    priority = spec.get("priority")
    return PodResources(
        resources.cpu_request_milli, resources.cpu_limit_milli,
        resources.memory_request_mega, resources.memory_limit_mega,
        resources.gpu_request, resources.gpu_limit, resources.extended,
        constraints_of(spec),
        priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
    )


def held_node(pod: Mapping[str, Any]) -> str:
    """The node whose room a non-terminal pod holds: its `spec.nodeName`, or, while it
    waits, the node kube-scheduler nominated for it after preempting others there
    (`status.nominatedNodeName`: that room is held for it, nobody may grow into it)."""
    node = (pod.get("spec") or {}).get("nodeName") or ""
    if node:
        return node
    nominated = (pod.get("status") or {}).get("nominatedNodeName") or ""
    return nominated if isinstance(nominated, str) else ""


@dataclass(frozen=True, slots=True)
class _PodEntry:
    resources: PodResources
    node: str  # "" when not bound
    trainer: bool


class ResourceLedger:
    """Running sums of node capacity and pod requests; every update is O(1).

    Pods are keyed by (namespace, name). A pod counts in the aggregate requests
    while it is not Succeeded/Failed (Pending and terminating pods count, as in
    the original); it uses a node's room only once bound (`spec.nodeName`).
    A pod bound to a node the ledger does not know yet is kept, and its room is
    taken as soon as that node is added.

    A node no new pod can be scheduled on (cordoned, NotReady, tainted:
    `node_schedulable`) offers no room: it is left out of the per-node room, and
    counts in the totals only with what its pods request (as if it were full), so
    the load ratio stays what the pods really use of the schedulable cluster.
    """

    def __init__(self, is_trainer: Callable[[Mapping[str, Any]], bool] = is_trainer_pod) -> None:
        self._is_trainer = is_trainer
        self._nodes: dict[str, NodeCapacity] = {}
        self._closed: dict[str, NodeCapacity] = {}  # nodes no new pod can go to
        self._used_cpu: dict[str, int] = {}
        self._used_memory: dict[str, int] = {}
        self._used_gpu: dict[str, int] = {}
        self._used_other: dict[str, dict[str, int]] = {}  # per node: extended + pods
        self._facts: dict[str, NodeFacts] = {}
        self._quotas: dict[tuple[str, str], QuotaRoom] = {}
        self._pods: dict[tuple[str, str], _PodEntry] = {}
        self._pending: dict[tuple[str, str], PodResources] = {}
        self._totals = [0, 0, 0]  # cpu, memory, gpu allocatable
        self._sums = [0, 0, 0, 0, 0, 0]  # cpu req/lim, mem req/lim, gpu req/lim

    # -- nodes -------------------------------------------------------------------------

    def set_node(
        self, name: str, capacity: NodeCapacity, schedulable: bool = True,
        facts: NodeFacts | None = None,
    ) -> None:
        """Add a node or replace its capacity (``schedulable`` False: it offers no room)."""
        self.remove_node(name)
        if facts is not None and (facts.labels or facts.taints):
            self._facts[name] = facts
        if not schedulable:
            self._closed[name] = capacity
            return
        self._nodes[name] = capacity
        self._totals[0] += capacity.cpu_milli
        self._totals[1] += capacity.memory_mega
        self._totals[2] += capacity.gpu

    def set_node_object(self, node: Mapping[str, Any]) -> None:
        """Add or replace a Kubernetes Node dict (ResourceError/QuantityError when unreadable)."""
        capacity = node_capacity(node)
        name = node["metadata"].get("name")
        if not isinstance(name, str) or not name:
            raise ResourceError("node: metadata.name is missing")
        self.set_node(name, capacity, node_schedulable(node), node_facts(node))

    def remove_node(self, name: str) -> None:
        """Forget a node (its pods' requests still count in the aggregate)."""
        self._closed.pop(name, None)
        self._facts.pop(name, None)
        capacity = self._nodes.pop(name, None)
        if capacity is not None:
            self._totals[0] -= capacity.cpu_milli
            self._totals[1] -= capacity.memory_mega
            self._totals[2] -= capacity.gpu

    # -- pods --------------------------------------------------------------------------

    def set_pod_resources(
        self,
        namespace: str,
        name: str,
        resources: PodResources,
        *,
        node: str = "",
        trainer: bool = False,
        terminal: bool = False,
    ) -> None:
        """Add or replace a pod by its parts; `terminal` (Succeeded/Failed) removes it."""
        key = (namespace, name)
        self.remove_pod(namespace, name)
        if terminal:
            return
        self._pods[key] = _PodEntry(resources, node, trainer)
        sums = self._sums
        sums[0] += resources.cpu_request_milli
        sums[1] += resources.cpu_limit_milli
        sums[2] += resources.memory_request_mega
        sums[3] += resources.memory_limit_mega
        sums[4] += resources.gpu_request
        sums[5] += resources.gpu_limit
        if node:
            self._used_cpu[node] = self._used_cpu.get(node, 0) + resources.cpu_request_milli
            self._used_memory[node] = self._used_memory.get(node, 0) + resources.memory_request_mega
            self._used_gpu[node] = self._used_gpu.get(node, 0) + resources.gpu_request
            other = self._used_other.setdefault(node, {})
            other["pods"] = other.get("pods", 0) + 1
            for resource, amount in resources.extended:
                other[resource] = other.get(resource, 0) + amount
        elif not trainer:
            self._pending[key] = resources

    def set_pod(self, pod: Mapping[str, Any]) -> None:
        """Add or replace a Kubernetes Pod dict (phase and binding taken from it).

        Raises PodRequestError naming the pod and the bad field.
        """
        metadata: Mapping[str, Any] = {}
        try:
            metadata = field(pod, "metadata", dict, "metadata")
            namespace = metadata.get("namespace") or "default"
            name = metadata.get("name", "")
            phase = field(pod, "status", dict, "status").get("phase")
            if phase in TERMINAL_PHASES:
                self.remove_pod(namespace, name)
                return
            resources = pod_request(pod)
            if not isinstance(field(pod, "spec", dict, "spec").get("nodeName") or "", str):
                raise PodRequestError("spec.nodeName: must be a string")
            node = held_node(pod)
            trainer = self._is_trainer(pod)
            if not node and not trainer:
                resources = pending_pod_resources(pod, resources)
        except PodRequestError as error:
            where = f"{metadata.get('namespace') or 'default'}/{metadata.get('name', '?')}"
            raise PodRequestError(f"pod {where}: {error}") from None
        self.set_pod_resources(namespace, name, resources, node=node, trainer=trainer)

    def remove_pod(self, namespace: str, name: str) -> None:
        """Forget a pod (deleted, or finished)."""
        key = (namespace, name)
        entry = self._pods.pop(key, None)
        if entry is None:
            return
        resources = entry.resources
        sums = self._sums
        sums[0] -= resources.cpu_request_milli
        sums[1] -= resources.cpu_limit_milli
        sums[2] -= resources.memory_request_mega
        sums[3] -= resources.memory_limit_mega
        sums[4] -= resources.gpu_request
        sums[5] -= resources.gpu_limit
        if entry.node:
            self._used_cpu[entry.node] -= resources.cpu_request_milli
            self._used_memory[entry.node] -= resources.memory_request_mega
            self._used_gpu[entry.node] -= resources.gpu_request
            other = self._used_other[entry.node]
            other["pods"] -= 1
            for resource, amount in resources.extended:
                other[resource] -= amount
        else:
            self._pending.pop(key, None)

    def __len__(self) -> int:
        return len(self._pods)

    # -- quotas ------------------------------------------------------------------------

    def set_quota(self, quota: QuotaRoom) -> None:
        """Add or replace a namespace's ResourceQuota (`edl.accounting.quota.quota_room`)."""
        self._quotas[(quota.namespace, quota.name)] = quota

    def remove_quota(self, namespace: str, name: str) -> None:
        self._quotas.pop((namespace, name), None)

    # -- the policy's view -------------------------------------------------------------

    def snapshot(self) -> ClusterResource:
        """The current state as an immutable ClusterResource (copies per-node maps)."""
        used_cpu, used_memory, used_gpu = self._used_cpu, self._used_memory, self._used_gpu
        nodes = self._nodes
        totals = list(self._totals)
        for name, capacity in self._closed.items():  # full: only what its pods use
            totals[0] += min(used_cpu.get(name, 0), capacity.cpu_milli)
            totals[1] += min(used_memory.get(name, 0), capacity.memory_mega)
            totals[2] += min(used_gpu.get(name, 0), capacity.gpu)
        return ClusterResource(
            node_count=len(nodes),
            gpu_request=self._sums[4],
            gpu_limit=self._sums[5],
            gpu_total=totals[2],
            cpu_request_milli=self._sums[0],
            cpu_limit_milli=self._sums[1],
            cpu_total_milli=totals[0],
            memory_request_mega=self._sums[2],
            memory_limit_mega=self._sums[3],
            memory_total_mega=totals[1],
            nodes=Nodes(
                cpu_idle_milli={n: c.cpu_milli - used_cpu.get(n, 0) for n, c in nodes.items()},
                memory_free_mega={
                    n: c.memory_mega - used_memory.get(n, 0) for n, c in nodes.items()
                },
                gpu_free={n: c.gpu - used_gpu.get(n, 0) for n, c in nodes.items()},
                extended_free=self._extended_free(),
                facts={n: f for n, f in self._facts.items() if n in nodes},
            ),
            pending=tuple(self._pending[key] for key in sorted(self._pending)),
            quotas=tuple(self._quotas[key] for key in sorted(self._quotas)),
        )

    def _extended_free(self) -> dict[str, dict[str, int]]:
        """Per open node, what is free of each other resource it offers (`pods` too)."""
        used, out = self._used_other, {}
        for name, capacity in self._nodes.items():
            if capacity.extended:
                taken = used.get(name) or {}
                out[name] = {key: amount - taken.get(key, 0) for key, amount in capacity.extended}
        return out
