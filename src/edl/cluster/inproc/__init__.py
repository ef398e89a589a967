"""The in-process control plane: one Python object that behaves like a small Kubernetes.

Simulation: ``InProcessCluster(VirtualClock(), SimulatedPodRunner(...))``.
Local runs: ``InProcessCluster(AsyncioClock(), <process pod runner>)``.
"""

from edl.cluster.inproc.clock import AsyncioClock, VirtualClock, VirtualTimeDeadlock
from edl.cluster.inproc.cluster import ClusterSample, InProcessCluster, ReplicaCounts, TrainerCounts
from edl.cluster.inproc.simulated_pods import Fixed, SimulatedPodRunner, Uniform

__all__ = [
    "AsyncioClock",
    "ClusterSample",
    "Fixed",
    "InProcessCluster",
    "ReplicaCounts",
    "SimulatedPodRunner",
    "TrainerCounts",
    "Uniform",
    "VirtualClock",
    "VirtualTimeDeadlock",
]
