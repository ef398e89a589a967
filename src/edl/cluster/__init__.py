"""Clusters behind one port: Kubernetes (`kube`) and the in-process control plane (`inproc`).

The Controller and Autoscaler depend only on `edl.cluster.port.Cluster`.
"""

from edl.cluster.port import (
    AlreadyExistsError,
    Clock,
    Cluster,
    ClusterError,
    ConflictError,
    JobPods,
    NotFoundError,
    PodRunner,
    TrainingJobHandler,
)

__all__ = [
    "AlreadyExistsError",
    "Clock",
    "Cluster",
    "ClusterError",
    "ConflictError",
    "JobPods",
    "NotFoundError",
    "PodRunner",
    "TrainingJobHandler",
]
