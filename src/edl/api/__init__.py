"""edl's core data: Kubernetes quantities, resource lists and the TrainingJob model (pure)."""

from edl.api.errors import JobValidationError, Problem
from edl.api.jobfile import JobLoadError, load_trainingjob
from edl.api.quantity import QuantityError, cpu_milli, gpu_count, memory_mega, parse_quantity
from edl.api.resources import add_resource_list
from edl.api.trainingjob import TrainingJob

__all__ = [
    "JobLoadError",
    "JobValidationError",
    "Problem",
    "QuantityError",
    "TrainingJob",
    "add_resource_list",
    "cpu_milli",
    "gpu_count",
    "load_trainingjob",
    "memory_mega",
    "parse_quantity",
]
