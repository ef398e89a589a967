"""A pod's effective requests and limits, as the Kubernetes scheduler counts them.

Rule (Kubernetes >= 1.29, `resourcehelper.PodRequests`):
  requests = max(sum(app containers) + sum(sidecars), max over init containers i of
             (init_i + sidecars started before i)) + spec.overhead
where sidecars are init containers with `restartPolicy: Always`. Limits follow the
same rule; overhead is added to a limit only when that limit is set. A container
that gives a limit but no request requests its limit (the API server's default).

Where this differs from the original Go code: the original summed *every* init
and app container into a node's used room (so a pod with a 4-CPU init container
and a 1-CPU app appeared to use 5 CPUs on its node instead of 4), ignored
overhead and sidecars, and rounded each container up to a whole mega separately.
Here the effective request is computed exactly and rounded up once per pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from edl.accounting.types import PodResources
from edl.api.quantity import parse_quantity
from edl.api.role_requests import with_default_requests

if TYPE_CHECKING:
    from edl.api.trainingjob import TrainingJob

__all__ = [
    "PodRequestError",
    "ResourceError",
    "extended_request",
    "field",
    "pod_request",
    "trainer_request",
]

_GPU_NAMES = ("nvidia.com/gpu", "alpha.kubernetes.io/nvidia-gpu")
# internal order of the exact vectors: cpu, memory, gpu
_ZERO = (Fraction(0), Fraction(0), Fraction(0))
Vector = tuple[Fraction, Fraction, Fraction]


class ResourceError(ValueError):
    """A Node or Pod dict whose resources cannot be read; the message names the field path."""


class PodRequestError(ResourceError):
    """A pod whose resources cannot be read; names the field path."""


def field(obj: Mapping[str, Any], key: str, kind: type, path: str) -> Any:
    """obj[key] when it is a `kind` (absent or null -> an empty `kind`), else ResourceError."""
    value = obj.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind) or isinstance(value, bool):
        expected = "a mapping" if kind is dict else f"a {kind.__name__}"
        raise PodRequestError(f"{path}: must be {expected}")
    return value


@lru_cache(maxsize=4096)
def _quantity(text: str | int | float) -> Fraction:
    return parse_quantity(text)


def _vector(resources: Any, path: str) -> tuple[Vector, tuple[bool, bool, bool]]:
    """(cpu, memory, gpu) of a resource list, and which of the three were given."""
    if not resources:
        return _ZERO, (False, False, False)
    if not isinstance(resources, Mapping):
        raise PodRequestError(f"{path}: must be a mapping of resource name to quantity")
    values = [Fraction(0), Fraction(0), Fraction(0)]
    given = [False, False, False]
    for name, text in resources.items():
        if name == "cpu":
            index = 0
        elif name == "memory":
            index = 1
        elif name in _GPU_NAMES:
            if name == _GPU_NAMES[1] and _GPU_NAMES[0] in resources:
                continue  # both names given: nvidia.com/gpu wins, as edl.api.resources.gpu_of
            index = 2
        else:
            continue
        try:
            values[index] += _quantity(text)
        except (ValueError, TypeError):
            raise PodRequestError(f"{path}.{name}: invalid quantity {text!r}") from None
        given[index] = True
    return (values[0], values[1], values[2]), (given[0], given[1], given[2])


def _container(container: Any, path: str) -> tuple[Vector, Vector, tuple[bool, bool, bool]]:
    """(requests, limits, which limits are set) of one container, requests defaulted to limits."""
    if not isinstance(container, Mapping):
        raise PodRequestError(f"{path}: must be a mapping")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise PodRequestError(f"{path}.resources: must be a mapping")
    requests, requested = _vector(resources.get("requests"), f"{path}.resources.requests")
    limits, limited = _vector(resources.get("limits"), f"{path}.resources.limits")
    if limited != (False, False, False):
        chosen = [limits[i] if limited[i] and not requested[i] else requests[i]
                  for i in range(3)]
        requests = (chosen[0], chosen[1], chosen[2])
    return requests, limits, limited


def _add(a: Vector, b: Vector) -> Vector:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


def _max(a: Vector, b: Vector) -> Vector:
    return (max(a[0], b[0]), max(a[1], b[1]), max(a[2], b[2]))


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


_MAIN_NAMES = frozenset({"cpu", "memory", *_GPU_NAMES})


def _others(resources: Any) -> dict[str, Fraction]:
    """Every resource of a (validated) list but CPU, memory and the GPU names."""
    if not isinstance(resources, Mapping):
        return {}
    out = {}
    for name, text in resources.items():
        if name not in _MAIN_NAMES:
            try:
                out[str(name)] = _quantity(text)
            except (ValueError, TypeError):
                continue  # a bad quantity: `_vector` names it for the main resources
    return out


def _container_others(container: Mapping[str, Any]) -> dict[str, Fraction]:
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        return {}
    requests = _others(resources.get("requests"))
    for name, amount in _others(resources.get("limits")).items():
        requests.setdefault(name, amount)  # a limit without a request requests the limit
    return requests


def _merge(a: dict[str, Fraction], b: dict[str, Fraction], how: Any) -> dict[str, Fraction]:
    return {k: how(a.get(k, Fraction(0)), b.get(k, Fraction(0))) for k in a.keys() | b.keys()}


def _add_dicts(x: Fraction, y: Fraction) -> Fraction:
    return x + y


def extended_request(spec: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """Requests of every resource but CPU, memory and GPUs, by `pod_request`'s rule."""
    apps: dict[str, Fraction] = {}
    for container in spec.get("containers") or ():
        if isinstance(container, Mapping):
            apps = _merge(apps, _container_others(container), _add_dicts)
    init: dict[str, Fraction] = {}
    sidecars: dict[str, Fraction] = {}
    for container in spec.get("initContainers") or ():
        if not isinstance(container, Mapping):
            continue
        own = _container_others(container)
        if container.get("restartPolicy") == "Always":
            apps = _merge(apps, own, _add_dicts)
            sidecars = _merge(sidecars, own, _add_dicts)
            own = sidecars
        else:
            own = _merge(own, sidecars, _add_dicts)
        init = _merge(init, own, max)
    total = _merge(_merge(apps, init, max), _others(spec.get("overhead")), _add_dicts)
    return tuple(sorted((k, _ceil(v)) for k, v in total.items() if v > 0))


def pod_request(pod: Mapping[str, Any]) -> PodResources:
    """Effective requests and limits of a Kubernetes Pod dict (see the module doc).

    Raises PodRequestError naming the field path of a bad quantity.
    """
    spec = field(pod, "spec", dict, "spec")
    requests, limits = _ZERO, _ZERO
    limited = [False, False, False]
    for index, container in enumerate(field(spec, "containers", list, "spec.containers")):
        req, lim, has = _container(container, f"spec.containers[{index}]")
        requests, limits = _add(requests, req), _add(limits, lim)
        limited = [limited[i] or has[i] for i in range(3)]

    init_requests, init_limits = _ZERO, _ZERO
    sidecar_requests, sidecar_limits = _ZERO, _ZERO
    for index, container in enumerate(field(spec, "initContainers", list, "spec.initContainers")):
        req, lim, has = _container(container, f"spec.initContainers[{index}]")
        limited = [limited[i] or has[i] for i in range(3)]
        if container.get("restartPolicy") == "Always":  # a sidecar runs beside the app
            requests, limits = _add(requests, req), _add(limits, lim)
            sidecar_requests = _add(sidecar_requests, req)
            sidecar_limits = _add(sidecar_limits, lim)
            req, lim = sidecar_requests, sidecar_limits
        else:
            req, lim = _add(req, sidecar_requests), _add(lim, sidecar_limits)
        init_requests, init_limits = _max(init_requests, req), _max(init_limits, lim)
    requests, limits = _max(requests, init_requests), _max(limits, init_limits)

    overhead, _ = _vector(spec.get("overhead"), "spec.overhead")
    requests = _add(requests, overhead)
    padded = [limits[i] + overhead[i] if limited[i] else limits[i] for i in range(3)]
    limits = (padded[0], padded[1], padded[2])
    return PodResources(
        cpu_request_milli=_ceil(requests[0] * 1000),
        cpu_limit_milli=_ceil(limits[0] * 1000),
        memory_request_mega=_ceil(requests[1] / 1_000_000),
        memory_limit_mega=_ceil(limits[1] / 1_000_000),
        gpu_request=_ceil(requests[2]),
        gpu_limit=_ceil(limits[2]),
        extended=extended_request(spec),
    )


def trainer_request(job: TrainingJob) -> PodResources:
    """What one trainer pod of ``job`` asks for (its container's requests and limits).

    Why not read the fields directly: `pod_request` applies Kubernetes' rules
    (limits stand in for missing requests, GPU spellings), and the autoscaler and
    `edl plan` must size a trainer exactly as the cluster will.
    """
    resources = with_default_requests(
        "trainer", job.spec.trainer.resources.model_dump(by_alias=True, exclude_none=True)
    )
    return pod_request({"spec": {"containers": [{"name": "trainer", "resources": resources}]}})
