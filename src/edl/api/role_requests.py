"""The cpu and memory every container edl creates requests when its role does not say.

Why: a namespace with a ResourceQuota on `requests.cpu`/`requests.memory` (or
`cpu`/`memory`) makes the API server refuse a pod whose containers leave them out
("failed quota: ...: must specify requests.cpu for: master"), and a LimitRange
with a `min` or a `maxLimitRequestRatio` refuses a request of 0. So each
container states both, per resource: a role that gives a resource's request or
limit (`spec.<role>.resources`) keeps its own (a limit alone is its request,
as Kubernetes defaults it); otherwise the role's default below is requested.
The etcd sidecar, which has no section of its own, always requests its default.
The autoscaler sizes a trainer with the same rule (accounting/request.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ROLE_REQUESTS", "with_default_requests"]

# documented in docs/kubernetes.md ("Requests edl states"); small enough for a laptop
# cluster, large enough for a LimitRange's usual min and limit/request ratios
ROLE_REQUESTS: dict[str, dict[str, str]] = {
    "master": {"cpu": "100m", "memory": "128Mi"},
    "etcd": {"cpu": "100m", "memory": "128Mi"},
    "pserver": {"cpu": "250m", "memory": "256Mi"},
    "trainer": {"cpu": "250m", "memory": "256Mi"},
}


def with_default_requests(role: str, resources: Mapping[str, Any]) -> dict[str, Any]:
    """``resources`` ({"limits": ..., "requests": ...}) with the role's missing requests added."""
    out = {kind: dict(values) for kind, values in resources.items() if values}
    given = set(out.get("requests", {})) | set(out.get("limits", {}))
    missing = {name: value for name, value in ROLE_REQUESTS[role].items() if name not in given}
    if missing:
        out["requests"] = {**out.get("requests", {}), **missing}
    return out
