"""The in-process control plane: one Python object that behaves like a small Kubernetes.

Simulation: ``InProcessCluster(VirtualClock(), SimulatedPodRuntime(...))``.
Local runs: ``InProcessCluster(AsyncioClock(), <process runtime>)``.
"""

from edl.cluster.inproc.clock import AsyncioClock, VirtualClock, VirtualTimeDeadlock
from edl.cluster.inproc.cluster import ClusterSample, InProcessCluster, ReplicaCounts, TrainerCounts
from edl.cluster.inproc.runtime import Fixed, SimulatedPodRuntime, Uniform

__all__ = [
    "AsyncioClock",
    "ClusterSample",
    "Fixed",
    "InProcessCluster",
    "ReplicaCounts",
    "SimulatedPodRuntime",
    "TrainerCounts",
    "Uniform",
    "VirtualClock",
    "VirtualTimeDeadlock",
]
