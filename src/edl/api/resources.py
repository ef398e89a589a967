"""Resource lists (`{"cpu": "500m", "memory": "1Gi", ...}`) as plain dicts.

The original's `AddResourceList` summed two `v1.ResourceList`s in place; the
accounting code and the scheduler read CPU/memory/GPU out of them. Everything
here is pure arithmetic on exact quantities.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from fractions import Fraction

from edl.api.quantity import QuantityLike, cpu_milli, gpu_count, memory_mega, parse_quantity

__all__ = [
    "CPU",
    "GPU",
    "GPU_LEGACY",
    "GPU_NAMES",
    "MEMORY",
    "ResourceList",
    "add_resource_list",
    "effective_requests",
    "gpu_of",
    "list_cpu_milli",
    "list_memory_mega",
    "parse_resource_list",
]

CPU = "cpu"
MEMORY = "memory"
GPU = "nvidia.com/gpu"
GPU_LEGACY = "alpha.kubernetes.io/nvidia-gpu"
GPU_NAMES = (GPU, GPU_LEGACY)

ResourceList = Mapping[str, QuantityLike]


def parse_resource_list(resources: ResourceList | None, field: str = "") -> dict[str, Fraction]:
    """Parse every quantity of a resource list; errors name `field.<resource>`."""
    prefix = f"{field}." if field else ""
    return {
        name: parse_quantity(text, f"{prefix}{name}") for name, text in (resources or {}).items()
    }


def add_resource_list(
    a: MutableMapping[str, QuantityLike], b: ResourceList | None
) -> MutableMapping[str, QuantityLike]:
    """Add b into a in place, keeping every resource name of both; returns a.

    Summed entries become exact Fractions; names only in `a` keep their value.
    """
    for name, quantity in (b or {}).items():
        added = parse_quantity(quantity, name)
        a[name] = parse_quantity(a[name], name) + added if name in a else added
    return a


def effective_requests(
    requirements: Mapping[str, ResourceList | None] | None,
) -> dict[str, Fraction]:
    """Requests as Kubernetes applies them: a resource with only a limit requests its limit."""
    requirements = requirements or {}
    limits = parse_resource_list(requirements.get("limits"), "limits")
    requests = parse_resource_list(requirements.get("requests"), "requests")
    return {**limits, **requests}


def list_cpu_milli(resources: ResourceList | None) -> int:
    """CPU of a resource list in milli (0 when absent)."""
    resources = resources or {}
    return cpu_milli(resources[CPU], CPU) if CPU in resources else 0


def list_memory_mega(resources: ResourceList | None) -> int:
    """Memory of a resource list in mega, rounded up (0 when absent)."""
    resources = resources or {}
    return memory_mega(resources[MEMORY], MEMORY) if MEMORY in resources else 0


def gpu_of(resources: ResourceList | None) -> int:
    """GPUs of a resource list under either name (`nvidia.com/gpu` wins if both are set)."""
    resources = resources or {}
    for name in GPU_NAMES:
        if name in resources:
            return gpu_count(resources[name], name)
    return 0
