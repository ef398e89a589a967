"""`inquire_resource`: Kubernetes Node and Pod dicts -> ClusterResource (pure)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from edl.accounting.ledger import ResourceLedger, is_trainer_pod
from edl.accounting.types import ClusterResource

__all__ = ["inquire_resource"]


def inquire_resource(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    is_trainer: Callable[[Mapping[str, Any]], bool] = is_trainer_pod,
) -> ClusterResource:
    """The original's `InquiryResource`, without the API calls.

    Totals are the nodes' allocatable; requests and limits sum every pod that is
    not Succeeded/Failed (pending and terminating pods included); a pod takes
    room from a node only when bound to it (`spec.nodeName`). Unbound pods that
    `is_trainer` rejects are listed in `ClusterResource.pending`.
    """
    ledger = ResourceLedger(is_trainer)
    for node in nodes:
        ledger.set_node_object(node)
    for pod in pods:
        ledger.set_pod(pod)
    return ledger.snapshot()
