"""ResourceQuotas as the API server's quota admission applies them to pods (pure).

A pod may be created in a namespace only while, for every ResourceQuota there that
counts it (its scopes match the pod), every capped resource stays within `hard`
once the pod's usage is added to `used` (`pkg/quota/v1/evaluator/core/pods.go`:
`cpu`/`requests.cpu`, `limits.cpu`, the same for memory and ephemeral-storage,
`requests.<extended resource>`, `pods` and `count/pods`); otherwise it is refused
with 403 Forbidden "exceeded quota". A planner that grows a job past that only
earns refusals, so edl plans within `hard - used`.

Scopes (`pkg/quota/v1/evaluator/core/pods.go` `podMatchesScopeFunc`): `BestEffort`
(no CPU/memory requests or limits in any container), `NotBestEffort`,
`Terminating` (`spec.activeDeadlineSeconds` set), `NotTerminating`, and
`scopeSelector` expressions on `PriorityClass` (`In`/`NotIn`/`Exists`/`DoesNotExist`
on `spec.priorityClassName`). A quota whose scopes name anything else (such as
`CrossNamespacePodAffinity`) is taken not to count edl's pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edl.accounting.request import _ceil, _quantity
from edl.accounting.types import PodResources, QuotaRoom

__all__ = [
    "QuotaPod",
    "exceeded",
    "missing_requests",
    "pod_usage",
    "quota_matches",
    "quota_room",
    "trainers_allowed",
]

_MILLI = ("cpu", "requests.cpu", "limits.cpu")
_MEGA = ("memory", "requests.memory", "limits.memory")


def _amount(key: str, text: Any) -> int:
    value = _quantity(text)
    if key in _MILLI:
        return _ceil(value * 1000)
    if key in _MEGA:
        return _ceil(value / 1_000_000)
    return _ceil(value)


def _resource_map(raw: Any, where: str) -> dict[str, int]:
    if not isinstance(raw, Mapping):
        return {}
    out = {}
    for key, text in raw.items():
        try:
            out[str(key)] = _amount(str(key), text)
        except (ValueError, TypeError):
            raise ValueError(f"{where}.{key}: invalid quantity {text!r}") from None
    return out


def quota_room(obj: Mapping[str, Any], *, from_spec: bool = False) -> QuotaRoom:
    """A ResourceQuota dict -> QuotaRoom (ValueError naming a bad quantity), as quota
    admission reads it (`apiserver/pkg/admission/plugin/resourcequota/controller.go`).

    Admission enforces `status.hard` (the quota controller's copy of `spec.hard`) against
    `status.used`, and refuses every pod a quota counts while `used` lacks one of its
    hard resources ("status unknown for quota"). So: a raised or lowered quota binds
    with its old `status.hard` until it is synced; a quota not synced yet (no
    `status.hard`, or a `used` missing a resource) is unknown, and nothing grows under
    it (its resources read as used up). `from_spec`: a model whose quota controller
    syncs at once (the in-process cluster) reads `spec.hard` and the `used` it keeps.
    """
    metadata = obj.get("metadata") or {}
    name = str(metadata.get("name") or "?")
    namespace = str(metadata.get("namespace") or "default")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    where = f"resourcequota {namespace}/{name}"
    wanted = _resource_map(spec.get("hard"), f"{where}: spec.hard")
    used = _resource_map(status.get("used") if isinstance(status, Mapping) else None,
                         f"{where}: status.used")
    synced = _resource_map(status.get("hard") if isinstance(status, Mapping) else None,
                           f"{where}: status.hard")
    if from_spec:
        hard = wanted
    elif synced:
        hard = synced
        used = {**used, **{key: limit for key, limit in hard.items() if key not in used}}
    else:  # not synced yet: unknown, no growth (admission's view changes any moment)
        hard = wanted
        used = {**used, **hard}
    selector = []
    raw_selector = spec.get("scopeSelector") or {}
    for expression in (raw_selector.get("matchExpressions") or ()
                       if isinstance(raw_selector, Mapping) else ()):
        if isinstance(expression, Mapping):
            values = expression.get("values") or ()
            selector.append((
                str(expression.get("scopeName") or ""),
                str(expression.get("operator") or ""),
                tuple(str(v) for v in values) if isinstance(values, list) else (),
            ))
    scopes = spec.get("scopes") or ()
    return QuotaRoom(
        namespace, name, hard, used,
        tuple(str(s) for s in scopes) if isinstance(scopes, list) else (),
        tuple(selector),
    )


@dataclass(frozen=True, slots=True)
class QuotaPod:
    """What scope matching reads of a pod."""

    priority_class: str = ""
    best_effort: bool = False
    terminating: bool = False


def _scope_matches(scope: str, operator: str, values: Sequence[str], pod: QuotaPod) -> bool:
    if scope == "BestEffort":
        return pod.best_effort
    if scope == "NotBestEffort":
        return not pod.best_effort
    if scope == "Terminating":
        return pod.terminating
    if scope == "NotTerminating":
        return not pod.terminating
    if scope == "PriorityClass":
        name = pod.priority_class
        if operator == "Exists":
            return bool(name)
        if operator == "DoesNotExist":
            return not name
        if operator == "In":
            return bool(name) and name in values
        if operator == "NotIn":
            return not name or name not in values
    return False


def quota_matches(quota: QuotaRoom, pod: QuotaPod) -> bool:
    """Whether the quota counts this pod: every scope and selector expression matches."""
    return all(_scope_matches(scope, "Exists", (), pod) for scope in quota.scopes) and all(
        _scope_matches(scope, op, values, pod) for scope, op, values in quota.selector
    )


def pod_usage(key: str, pod: PodResources) -> int:
    """What one pod adds to a quota's `key` (0 for keys pods do not use)."""
    if key in ("pods", "count/pods"):
        return 1
    if key in ("cpu", "requests.cpu"):
        return pod.cpu_request_milli
    if key == "limits.cpu":
        return pod.cpu_limit_milli
    if key in ("memory", "requests.memory"):
        return pod.memory_request_mega
    if key == "limits.memory":
        return pod.memory_limit_mega
    name = key.removeprefix("requests.").removeprefix("limits.")
    if name in ("nvidia.com/gpu", "alpha.kubernetes.io/nvidia-gpu"):
        return pod.gpu_limit if key.startswith("limits.") else pod.gpu_request
    return dict(pod.extended).get(name, 0)


def exceeded(
    quotas: Sequence[QuotaRoom], namespace: str, pod: PodResources, traits: QuotaPod,
    extra: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
) -> str:
    """"" when one more pod fits every matching quota, else the admission's message.

    `extra`: per quota (namespace, name), usage not yet in `used` (pods planned).
    """
    for quota in quotas:
        if quota.namespace != namespace or not quota_matches(quota, traits):
            continue
        planned = (extra or {}).get((quota.namespace, quota.name)) or {}
        for key, hard in sorted(quota.hard.items()):
            want = pod_usage(key, pod)
            if want <= 0:
                continue
            used = quota.used.get(key, 0) + planned.get(key, 0)
            if used + want > hard:
                return (
                    f"exceeded quota: {quota.name}, requested: {key}={want}, "
                    f"used: {key}={used}, limited: {key}={hard}"
                )
    return ""


# `pkg/quota/v1/evaluator/core/pods.go` `validationSet`: a quota on one of these makes
# every container state it ("this was a mistake ... we did this before QoS was defined")
_MUST_STATE = frozenset({"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu",
                         "limits.memory"})


def _stated(container: Mapping[str, Any]) -> set[str]:
    """`podComputeUsageHelper`'s resource names for one container; a limit without a
    request requests the limit (the API server's defaulting, before admission)."""
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = {**limits, **(resources.get("requests") or {})}
    out = set()
    for name in ("cpu", "memory"):
        if name in requests:
            out |= {name, f"requests.{name}"}
        if name in limits:
            out.add(f"limits.{name}")
    return out


def missing_requests(
    quotas: Sequence[QuotaRoom], namespace: str, spec: Mapping[str, Any], traits: QuotaPod
) -> str:
    """"" when every container states what the namespace's matching quotas cap of CPU and
    memory, else the admission's 403 message: `failed quota: <name>: must specify
    requests.cpu for: etcd` (`podEvaluator.Constraints`, `enforcePodContainerConstraints`
    over containers and init containers; resources in name order, containers sorted)."""
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    for quota in quotas:
        if quota.namespace != namespace or not quota_matches(quota, traits):
            continue
        required = _MUST_STATE & set(quota.hard)
        missing: dict[str, set[str]] = {}
        for container in containers:
            for resource in required - _stated(container):
                missing.setdefault(resource, set()).add(str(container.get("name", "")))
        if missing:
            listed = "; ".join(f"{resource} for: {','.join(sorted(names))}"
                               for resource, names in sorted(missing.items()))
            return f"failed quota: {quota.name}: must specify {listed}"
    return ""


def trainers_allowed(
    quotas: Sequence[QuotaRoom], namespace: str, pod: PodResources, traits: QuotaPod
) -> tuple[int | None, str]:
    """How many more such pods the namespace's quotas admit (None: no cap), and the
    binding quota and key as `ns/name (key used/hard)`."""
    best: int | None = None
    why = ""
    for quota in quotas:
        if quota.namespace != namespace or not quota_matches(quota, traits):
            continue
        for key, hard in sorted(quota.hard.items()):
            want = pod_usage(key, pod)
            if want <= 0:
                continue
            used = quota.used.get(key, 0)
            count = max(0, (hard - used) // want)
            if best is None or count < best:
                best = count
                why = f"{quota.namespace}/{quota.name} ({key} {used}/{hard})"
    return best, why
