"""A role's pod template: edl's containers plus the user's pod fields and Pod Security defaults.

Why one place: every pod edl creates (master with its etcd sidecar, pservers,
trainers, a collective job's rendezvous pod and agents) passes Pod Security
`restricted` unless the user asks otherwise, and takes the role's
`nodeSelector`, `tolerations`, `affinity`, ... in plain Kubernetes form, so the
planner and the trainer controller read them from the template like any tool.

Rules: edl's labels win (a user label under `edl.dev/` is refused by the parser,
so none can break a selector); the user's `securityContext` and
`containerSecurityContext` are merged key by key over the restricted defaults
(a nested map such as `capabilities` merges too, a list replaces); no API token
is mounted unless the role names a ServiceAccount or sets
`automountServiceAccountToken`; the user's `env` follows edl's `EDL_*` variables.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from edl.api.names import LABEL_JOB, LABEL_ROLE
from edl.api.podoptions import PodOptions
from edl.api.trainingjob import TrainingJob
from edl.jobparser.statevolumes import other_roles_state

__all__ = [
    "ETCD_RUN_AS",
    "RESTRICTED_CONTAINER",
    "RESTRICTED_POD",
    "deep_merge",
    "finish_container",
    "pod_spec",
    "pod_template",
    "role_options",
]

# Pod Security Standards, `restricted` profile (kubernetes.io/docs/concepts/security/
# pod-security-standards): a non-root user, the runtime's seccomp profile, no privilege
# escalation, every capability dropped.
RESTRICTED_POD: dict[str, Any] = {
    "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_CONTAINER: dict[str, Any] = {
    "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
}
# quay.io/coreos/etcd is built on distroless/static and declares no user (root): with
# runAsNonRoot the kubelet would refuse it, so the sidecar runs as distroless' `nonroot`
ETCD_RUN_AS: dict[str, Any] = {"runAsUser": 65532, "runAsGroup": 65532}


def role_options(job: TrainingJob, role: str) -> PodOptions:
    """The role's section of the spec (`spec.master|pserver|trainer`)."""
    options = getattr(job.spec, role)
    assert isinstance(options, PodOptions), role
    return options


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`: maps merge key by key, anything else is replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _dump(value: Any) -> Any:
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return copy.deepcopy(value)


def finish_container(job: TrainingJob, role: str, container: dict[str, Any]) -> dict[str, Any]:
    """The role's edl container with its image (role over job) and the user's env: a
    variable edl also sets (one validation lets a user choose, `EDL_CHECKPOINT_DIR`) takes
    edl's place, so it comes before the variables that refer to it as ``$(NAME)`` and the
    list has each name once (server-side apply refuses a duplicate); the rest follows."""
    options = role_options(job, role)
    container["image"] = options.image or job.spec.image
    if options.env:
        user = {v["name"]: v for v in _dump(options.env)}
        env = [user.pop(v.get("name"), v) for v in container.get("env", [])]
        container["env"] = [*env, *user.values()]
    return container


def pod_spec(
    job: TrainingJob, role: str, containers: list[dict[str, Any]],
    volumes: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """The PodSpec of one role: containers, the job's and the role's pod fields, defaults."""
    options = role_options(job, role)
    user_container = _dump(options.container_security_context) or {}
    for container in containers:
        own = deep_merge(RESTRICTED_CONTAINER, container.get("securityContext") or {})
        container["securityContext"] = deep_merge(own, user_container)
    spec: dict[str, Any] = {"containers": containers}
    foreign = other_roles_state(job, role)
    volumes = [dict(v) for v in volumes or [] if v.get("name") not in foreign]
    if volumes:
        spec["volumes"] = volumes
    secrets = [dict(s) for s in job.spec.image_pull_secrets or []]
    for secret in _dump(options.image_pull_secrets) or []:
        if secret not in secrets:
            secrets.append(secret)
    if secrets:
        spec["imagePullSecrets"] = secrets
    if job.spec.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"  # keep resolving the master Service
    for key, value in (
        ("nodeSelector", options.node_selector),
        ("tolerations", options.tolerations),
        ("affinity", options.affinity),
        ("topologySpreadConstraints", options.topology_spread_constraints),
        ("priorityClassName", options.priority_class_name),
        ("serviceAccountName", options.service_account_name),
    ):
        if value is not None:
            spec[key] = _dump(value)
    token = options.automount_service_account_token
    if token is None and options.service_account_name is None:
        token = False  # job pods need no API access (docs/kubernetes.md)
    if token is not None:
        spec["automountServiceAccountToken"] = token
    spec["securityContext"] = deep_merge(RESTRICTED_POD, _dump(options.security_context) or {})
    return spec


def pod_template(
    job: TrainingJob, role: str, containers: list[dict[str, Any]],
    volumes: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """The role's pod template: the user's labels and annotations, edl's labels on top."""
    options = role_options(job, role)
    labels = {**(options.labels or {}), LABEL_JOB: job.metadata.name or "", LABEL_ROLE: role}
    metadata: dict[str, Any] = {"labels": labels}
    if options.annotations:
        metadata["annotations"] = dict(options.annotations)
    return {"metadata": metadata, "spec": pod_spec(job, role, containers, volumes)}
