"""Resource accounting: Kubernetes nodes and pods -> ClusterResource, Nodes (pure core)."""

from edl.accounting.inquire import inquire_resource
from edl.accounting.ledger import (
    TERMINAL_PHASES,
    NodeCapacity,
    ResourceLedger,
    is_trainer_pod,
    node_capacity,
)
from edl.accounting.request import PodRequestError, ResourceError, pod_request, trainer_request
from edl.accounting.types import ClusterResource, Nodes, PodResources

__all__ = [
    "TERMINAL_PHASES",
    "ClusterResource",
    "NodeCapacity",
    "Nodes",
    "PodRequestError",
    "PodResources",
    "ResourceError",
    "ResourceLedger",
    "inquire_resource",
    "is_trainer_pod",
    "node_capacity",
    "pod_request",
    "trainer_request",
]
