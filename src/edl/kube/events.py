"""Kubernetes Events for TrainingJobs: every scale decision and every failure, explained.

Why: `kubectl describe tj NAME` is where an operator looks first. Each scale
decision says before -> after, the policy's reason, and the cluster load the
policy saw against max_load_desired, as cluster-autoscaler explains its own.
Building an event is pure; posting never raises (an event lost is not worth
failing a reconcile for).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event

from edl.kube.crd import GROUP, KIND, VERSION
from edl.kube.retry import retry_call

if TYPE_CHECKING:
    from edl.accounting import ClusterResource

log = logging.getLogger(__name__)

COMPONENT = "edl-controller"


def cluster_load(res: ClusterResource) -> dict[str, float | None]:
    """Requested / allocatable per resource (None where the cluster has none of it)."""

    def ratio(requested: int, total: int) -> float | None:
        return requested / total if total > 0 else None

    return {
        "cpu": ratio(res.cpu_request_milli, res.cpu_total_milli),
        "memory": ratio(res.memory_request_mega, res.memory_total_mega),
        "gpu": ratio(res.gpu_request, res.gpu_total),
    }


def describe_load(res: ClusterResource | None, max_load_desired: float) -> str:
    if res is None:
        return f"cluster load unknown, max_load_desired {max_load_desired:.2f}"
    loads = cluster_load(res).items()
    parts = [f"{name} {value:.2f}" for name, value in loads if value is not None]
    text = f"cluster load {', '.join(parts) or 'n/a'} vs max_load_desired {max_load_desired:.2f}"
    over = [name for name, value in loads if value is not None and value > 1]
    if over:  # pending pods count: a load over 1 reads like a bug without this
        text += (f" (load = requested / allocatable, pending pods included; {' and '.join(over)}"
                 " over 1: pods ask for more than the nodes have, the rest waits Pending)")
    return text


def involved(namespace: str, name: str, uid: str | None) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                           "namespace": namespace, "name": name}
    if uid:
        ref["uid"] = uid
    return ref


def make_event(
    namespace: str, name: str, uid: str | None, *, reason: str, message: str,
    type_: str = "Normal", now: dt.datetime | None = None,
) -> dict[str, Any]:
    """A core/v1 Event about a TrainingJob (plain dict)."""
    now = now or dt.datetime.now(dt.UTC)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": involved(namespace, name, uid),
        "reason": reason,
        "message": message[:1024],
        "type": type_,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": os.environ.get("POD_NAME", COMPONENT),
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def scale_event(
    namespace: str, name: str, uid: str | None, *, before: int, after: int, reason: str,
    resources: ClusterResource | None, max_load_desired: float,
) -> dict[str, Any]:
    """The Event for one applied scale decision: the target changed (``ScalingUp`` /
    ``ScalingDown``); whether pods follow is the trainer controller's to say (a refused
    pod is a ``FailedCreate`` Warning), so this never claims trainers that do not run."""
    verb = "ScalingUp" if after > before else "ScalingDown"
    message = (f"target trainers {before} -> {after}: {reason or 'no reason given'}; "
               f"{describe_load(resources, max_load_desired)}")
    return make_event(namespace, name, uid, reason=verb, message=message)


class EventRecorder:
    """Posts Events through lightkube; failures are logged, never raised."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.posted = 0
        self.failed = 0

    async def post(self, event: Mapping[str, Any]) -> None:
        obj = Event.from_dict(dict(event))
        namespace = event["metadata"]["namespace"]
        try:
            # lightkube's create() overloads do not match its own generated resources
            await retry_call(lambda: self.client.create(  # type: ignore[call-overload]
                obj, namespace=namespace),
                             what="post event", attempts=3, retry_conflicts=False)
            self.posted += 1
        except Exception as exc:
            self.failed += 1
            log.warning("event %s not posted: %s", event.get("reason"), exc)
