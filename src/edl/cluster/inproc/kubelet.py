"""`PodLifecycle`: what a kubelet (and the scheduler's binding) does to a pod, in process.

A pod is created Pending, bound to a node by the scheduler (or pinned by
``spec.nodeName``), started by the `PodRunner`, Running once its containers
run, and gone once they exit. A deleted pod keeps its phase and its node's
room until its containers have exited (at most its grace period,
``terminationGracePeriodSeconds``, 30 s); a pod deleted before it was bound
goes at once. The exit code and the pod runner's termination message go to the
pod's ``status.containerStatuses``, where a podFailurePolicy looks for them.

Every transition updates the counters the rest of the cluster reads: the
owner's `OwnerPods`, the accounting `ResourceLedger`, the node index and the
utilisation sums, so nothing ever scans the pods.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Mapping
from typing import Any

from edl.accounting import PodResources, ResourceLedger
from edl.accounting.ledger import pending_pod_resources
from edl.accounting.quota import (
    QuotaPod,
    exceeded,
    missing_requests,
    pod_usage,
    quota_matches,
    quota_room,
)
from edl.api.names import ROLE_TRAINER
from edl.cluster.inproc.affinity import AffinityError, preferred_terms
from edl.cluster.inproc.pods import (
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    OwnerKey,
    OwnerPods,
    PodRecord,
)
from edl.cluster.inproc.preemption import Victim, find_candidate
from edl.cluster.inproc.scheduler import Node, NodeIndex, Scheduler
from edl.cluster.port import Clock, ClusterError, Manifest, PodRunner, TerminationMessages

DEFAULT_GRACE_PERIOD_S = 30.0

PodListener = Callable[[str, PodRecord], None]
"""Called with ("created"|"bound"|"running"|"deleting"|"exited", pod). Read, do not keep."""

ExitListener = Callable[[PodRecord, "int | None"], None]
"""Called once per pod when its containers have exited (owners count the exit here);
the code is None when they never ran."""

DeleteListener = Callable[[PodRecord], None]
"""Called once per pod when it is deleted (gets a deletionTimestamp), before it exits."""


class PodLifecycle:
    """The live pods of the cluster and their transitions."""

    def __init__(
        self,
        clock: Clock,
        pod_runner: PodRunner,
        nodes: NodeIndex,
        ledger: ResourceLedger,
        owners: dict[OwnerKey, OwnerPods],
        on_unschedulable: Callable[[], None],
    ) -> None:
        self.clock = clock
        self.pod_runner = pod_runner
        self.nodes = nodes
        self.ledger = ledger
        self.owners = owners  # shared with the workload controllers, which own its entries
        self.scheduler = Scheduler(
            nodes, self._bind, on_unschedulable, clock.call_soon, preempt=self._preempt
        )
        # admission: PriorityClass name -> value (`Priority`), and namespace quotas
        self.priority_classes: dict[str, int] = {}
        self.default_priority = 0  # the globalDefault PriorityClass's value
        self.quotas: dict[tuple[str, str], Manifest] = {}
        self.pods: dict[str, PodRecord] = {}  # uid -> live pod (not yet exited)
        self.by_key: dict[tuple[str, str], PodRecord] = {}
        self.on_exit: ExitListener = lambda pod, code: None
        self.on_delete: DeleteListener = lambda pod: None
        self.listeners: list[PodListener] = []
        self.first_pod_at: dict[tuple[str, str], float] = {}  # (ns, job label) -> time
        self.first_running_at: dict[tuple[str, str], float] = {}
        self.running_cpu_milli = 0
        self.running_cpu_by_node: dict[str, int] = {}  # Running pods' CPU requests per node
        self.running_pods = 0
        self.requested_cpu_milli = 0  # Σ CPU requests of live pods
        self._seq = itertools.count()

    # -- creation and deletion ---------------------------------------------------------
    def create(
        self, manifest: Manifest, resources: PodResources, owner: OwnerKey | None
    ) -> PodRecord:
        """Admit a pod: queue it for scheduling, or bind it at once if ``spec.nodeName``
        names a node. A node affinity the API server would reject raises `ClusterError`
        (422) naming every wrong field, and nothing is created."""
        metadata = manifest["metadata"]
        try:
            preferred = preferred_terms(manifest.get("spec"))
        except AffinityError as error:
            raise ClusterError("Pod", metadata.get("namespace", ""), metadata.get("name", ""),
                               str(error), status=422) from error
        self._admit(manifest, resources)
        seq = next(self._seq)
        now = self.clock.now()
        metadata["uid"] = f"pod-{seq}"
        metadata["creationTimestamp"] = now
        manifest["status"] = {"phase": PENDING}
        pod = PodRecord(manifest, resources, owner, seq, now, preferred)
        self.pods[pod.uid] = pod
        self.by_key[pod.key] = pod
        if owner is not None:
            owner_pods = self.owners[owner]
            owner_pods.pods[pod.uid] = pod
            owner_pods.count(pod, +1)
        if pod.job:
            self.first_pod_at.setdefault((pod.namespace, pod.job), now)
        pinned = (manifest.get("spec") or {}).get("nodeName")
        self.requested_cpu_milli += resources.cpu_request_milli
        trainer = pod.role == ROLE_TRAINER
        self.ledger.set_pod_resources(
            pod.namespace, pod.name,
            resources if trainer else pending_pod_resources(manifest, resources),
            trainer=trainer,
        )
        self._emit("created", pod)
        if pinned and pinned in self.nodes.by_name:
            node = self.nodes.by_name[pinned]
            self.nodes.take(
                node, resources.cpu_request_milli, resources.memory_request_mega,
                resources.gpu_request,
            )
            self._bind(pod, node)
        else:
            self.scheduler.enqueue(pod)
        return pod

    def delete(self, pod: PodRecord) -> None:
        """Delete a pod: at once if unbound; else it terminates within its grace period."""
        if pod.terminating or pod.uid not in self.pods:
            return
        self._transition(pod, lambda: setattr(pod, "terminating", True))
        pod.manifest["metadata"]["deletionTimestamp"] = self.clock.now()
        self.on_delete(pod)
        self._emit("deleting", pod)
        if pod.node is None:  # PodGC marks an unscheduled terminating pod Failed at once
            self.scheduler.dequeue(pod)
            self._drop_nomination(pod)
            self._exited(pod, None)
            return
        grace = (pod.manifest.get("spec") or {}).get(
            "terminationGracePeriodSeconds", DEFAULT_GRACE_PERIOD_S
        )
        self.pod_runner.stop(pod.manifest, float(grace))

    # -- transitions ---------------------------------------------------------------------
    def _transition(self, pod: PodRecord, change: Callable[[], None]) -> None:
        owner = self.owners.get(pod.owner) if pod.owner else None
        if owner is not None:
            owner.count(pod, -1)
        change()
        if owner is not None:
            owner.count(pod, +1)

    def _bind(self, pod: PodRecord, node: Node) -> None:
        self._transition(pod, lambda: setattr(pod, "node", node.name))
        pod.manifest["spec"]["nodeName"] = node.name
        pod.manifest["status"]["hostIP"] = node.name
        self.ledger.set_pod_resources(
            pod.namespace, pod.name, pod.resources, node=node.name,
            trainer=pod.role == ROLE_TRAINER,
        )
        self._emit("bound", pod)
        self.pod_runner.start(
            pod.manifest,
            lambda: self._running(pod),
            lambda code: self._exited(pod, code),
        )

    def _running(self, pod: PodRecord) -> None:
        if pod.uid not in self.pods or pod.phase != PENDING:
            return
        self._transition(pod, lambda: setattr(pod, "phase", RUNNING))
        now = self.clock.now()
        pod.running_at = now
        pod.manifest["status"] = {**pod.manifest["status"], "phase": RUNNING, "startTime": now}
        self.running_cpu_milli += pod.resources.cpu_request_milli
        if pod.node is not None:
            by_node = self.running_cpu_by_node
            by_node[pod.node] = by_node.get(pod.node, 0) + pod.resources.cpu_request_milli
        self.running_pods += 1
        if pod.role == ROLE_TRAINER and pod.job:
            self.first_running_at.setdefault((pod.namespace, pod.job), now)
        self._emit("running", pod)

    def _exited(self, pod: PodRecord, code: int | None) -> None:
        """The pod's containers are gone. ``code`` None: they never ran (deleted before
        its containers started, or before it was bound): Failed, no terminated state."""
        if self.pods.pop(pod.uid, None) is None:
            return
        if code is not None and pod.running_at is None and pod.terminating:
            code = None  # stopped before its containers started: nothing terminated
        del self.by_key[pod.key]
        if pod.phase == RUNNING:
            self.running_cpu_milli -= pod.resources.cpu_request_milli
            if pod.node is not None:
                self.running_cpu_by_node[pod.node] -= pod.resources.cpu_request_milli
            self.running_pods -= 1
        if pod.node is not None:
            res = pod.resources
            self.nodes.take(
                self.nodes.by_name[pod.node],
                -res.cpu_request_milli, -res.memory_request_mega, -res.gpu_request,
            )
        self.ledger.remove_pod(pod.namespace, pod.name)
        self.requested_cpu_milli -= pod.resources.cpu_request_milli
        self._record_exit(pod, code)
        self.on_exit(pod, code)  # before the phase changes: owners uncount the pod's state
        pod.phase = SUCCEEDED if code == 0 else FAILED  # the kubelet's phase, deleted or not
        pod.manifest["status"]["phase"] = pod.phase
        self._emit("exited", pod)
        for waiter in self.scheduler.queue.values():
            waiter.waiting_for.discard(pod.uid)
        if pod.node is not None:
            self.scheduler.room_freed()

    # -- admission and preemption -------------------------------------------------------
    def _admit(self, manifest: Manifest, resources: PodResources) -> None:
        """The API server's admission: `Priority` resolves `priorityClassName` into
        `spec.priority` (an unknown class is refused), `ResourceQuota` refuses a pod
        with a container that does not state a CPU or memory the quota caps (403 "must
        specify") or that would take its namespace past a quota (403 "exceeded quota")."""
        metadata, spec = manifest["metadata"], manifest.setdefault("spec", {})
        namespace, name = metadata.get("namespace", ""), metadata.get("name", "")
        class_name = spec.get("priorityClassName")
        if class_name:
            if class_name not in self.priority_classes:
                raise ClusterError("Pod", namespace, name,
                                   f"no PriorityClass with name {class_name} was found",
                                   status=403)
            spec["priority"] = self.priority_classes[class_name]
        elif not isinstance(spec.get("priority"), int):
            spec["priority"] = self.default_priority
        if not self.quotas:
            return
        rooms = [quota_room(q, from_spec=True) for (ns, _), q in sorted(self.quotas.items())
                 if ns == namespace]
        if not rooms:
            return
        traits = quota_traits(spec, resources)
        used = self.quota_usage(namespace)
        message = (missing_requests(rooms, namespace, spec, traits)
                   or exceeded(rooms, namespace, resources, traits, used))
        if message:
            raise ClusterError("Pod", namespace, name, message, status=403)

    def quota_usage(self, namespace: str) -> dict[tuple[str, str], dict[str, int]]:
        """Per quota of the namespace, what its live pods use of each capped resource
        (what the quota controller writes into `status.used`)."""
        out: dict[tuple[str, str], dict[str, int]] = {}
        pods = [p for p in self.pods.values() if p.namespace == namespace]
        for (ns, qname), quota in self.quotas.items():
            if ns != namespace:
                continue
            room = quota_room(quota, from_spec=True)
            counted = [p for p in pods
                       if quota_matches(room, quota_traits(p.manifest["spec"], p.resources))]
            out[(ns, qname)] = {
                key: sum(pod_usage(key, p.resources) for p in counted) for key in room.hard
            }
        return out

    def _preempt(self, pod: PodRecord) -> bool:
        """kube-scheduler's default preemption for a pod that fits nowhere
        (`preemption.py`); True when it was nominated to a node."""
        if (pod.manifest.get("spec") or {}).get("preemptionPolicy") == "Never":
            return False
        res = pod.resources
        want = (res.cpu_request_milli, res.memory_request_mega, res.gpu_request)
        lower: dict[str, list[Victim]] = {}
        for other in self.pods.values():
            if other.node is not None and not other.terminating and other.priority < pod.priority:
                r = other.resources
                lower.setdefault(other.node, []).append(Victim(
                    other.uid, other.priority, other.running_at or other.created_at,
                    (r.cpu_request_milli, r.memory_request_mega, r.gpu_request)))
        if not lower:
            return False
        allowed = self.nodes.eligible(pod.constraints)
        by_index = {n.index: n for n in self.nodes.nodes if n.name in lower}
        candidate = find_candidate(
            want, pod.priority,
            [i for i in sorted(by_index) if allowed[i]],
            lambda i: (by_index[i].free_cpu_milli, by_index[i].free_memory_mega,
                       by_index[i].free_gpu),
            lambda i: lower[by_index[i].name],
        )
        if candidate is None:
            return False
        node = by_index[candidate.node]
        pod.nominated = node.name
        pod.manifest["status"]["nominatedNodeName"] = node.name
        pod.waiting_for = {victim.name for victim in candidate.victims}
        self.nodes.take(node, *want)  # held for it: nobody else binds into it
        self.ledger.set_pod_resources(pod.namespace, pod.name, res, node=node.name,
                                      trainer=pod.role == ROLE_TRAINER)
        for victim in candidate.victims:
            doomed = self.pods.get(victim.name)
            if doomed is not None:
                status = doomed.manifest["status"]
                status["conditions"] = [*(status.get("conditions") or ()), {
                    "type": "DisruptionTarget", "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": f"{pod.namespace}/{pod.name} on node {node.name}"}]
                self.delete(doomed)
        return True

    def _drop_nomination(self, pod: PodRecord) -> None:
        if pod.nominated:
            res = pod.resources
            self.nodes.take(self.nodes.by_name[pod.nominated], -res.cpu_request_milli,
                            -res.memory_request_mega, -res.gpu_request)
            pod.nominated = ""

    def _record_exit(self, pod: PodRecord, code: int | None) -> None:
        """Write the exit into the pod's status, where a podFailurePolicy looks for it.

        The pod runner reports one exit code per pod (its first failing container's),
        so every container is shown terminated with that code. A pod whose
        containers never started shows them waiting: no exit code for a policy
        to match (Kubernetes then counts the failure).
        """
        containers = (pod.manifest.get("spec") or {}).get("containers") or ()
        if code is None:
            pod.manifest["status"] = {
                **pod.manifest["status"],
                "containerStatuses": [
                    {"name": c.get("name", ""), "state": {"waiting": {"reason": "PodInitializing"}}}
                    for c in containers
                ],
            }
            return
        message = ""
        if code != 0 and isinstance(self.pod_runner, TerminationMessages):
            message = str(self.pod_runner.termination_message(pod.name) or "")
        terminated: dict[str, Any] = {"exitCode": code, "finishedAt": self.clock.now()}
        if message:
            terminated["message"] = message
        pod.manifest["status"] = {
            **pod.manifest["status"],
            "exitCode": code,
            "containerStatuses": [
                {"name": c.get("name", ""), "state": {"terminated": dict(terminated)}}
                for c in containers
            ],
        }

    def removed(self, pod: PodRecord) -> None:
        """A finished pod kept for its owner was removed (garbage collected)."""
        self._emit("removed", pod)

    def _emit(self, event: str, pod: PodRecord) -> None:
        for listener in self.listeners:
            with contextlib.suppress(Exception):
                listener(event, pod)


def quota_traits(spec: Mapping[str, Any], resources: PodResources) -> QuotaPod:
    """What quota scopes read of a pod."""
    return QuotaPod(
        str(spec.get("priorityClassName") or ""),
        best_effort=not (resources.cpu_request_milli or resources.cpu_limit_milli
                         or resources.memory_request_mega or resources.memory_limit_mega),
        terminating=spec.get("activeDeadlineSeconds") is not None,
    )
