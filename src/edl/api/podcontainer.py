"""What a role's containers run as and with: security contexts, env, pull secrets (core/v1).

Why typed: the securityContexts are merged over edl's Pod Security `restricted`
defaults, and a wrong field (an unknown seccomp type, an env var with both value and
valueFrom) should be named at submission. Kubernetes' field names throughout.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from annotated_types import MaxLen
from pydantic import Field, StrictBool, StrictStr

from edl.api.k8smodel import (
    MAX_ITEMS,
    EnvName,
    K8sObject,
    NonNegative64,
    Rule,
    Subdomain,
)

__all__ = [
    "Capabilities",
    "EnvVar",
    "LocalObjectReference",
    "PodSecurityContext",
    "SeccompProfile",
    "SecurityContext",
]


# -- security contexts -----------------------------------------------------------------------

_PROFILE_RULE = Rule(
    "(self.type == 'Localhost') == (has(self.localhostProfile) && "
    "self.localhostProfile.size() > 0)",
    "localhostProfile is required with type Localhost and only then",
    "localhostProfile", lambda p: (p.type == "Localhost") == bool(p.localhostProfile),
)


class SeccompProfile(K8sObject):
    """The seccomp profile: RuntimeDefault, Localhost (with localhostProfile) or Unconfined."""

    type: Literal["RuntimeDefault", "Localhost", "Unconfined"] = Field(description="The kind.")
    localhostProfile: StrictStr | None = Field(
        default=None, description="The node's profile file (Localhost only).")
    rules: ClassVar[tuple[Rule, ...]] = (_PROFILE_RULE,)


class AppArmorProfile(SeccompProfile):
    """The AppArmor profile: RuntimeDefault, Localhost (with localhostProfile) or Unconfined."""


class SELinuxOptions(K8sObject):
    """The SELinux context."""

    user: StrictStr | None = Field(default=None, description="SELinux user.")
    role: StrictStr | None = Field(default=None, description="SELinux role.")
    type: StrictStr | None = Field(default=None, description="SELinux type.")
    level: StrictStr | None = Field(default=None, description="SELinux level.")


class Sysctl(K8sObject):
    """A namespaced sysctl."""

    name: StrictStr = Field(description="The sysctl.")
    value: StrictStr = Field(description="Its value.")


class Capabilities(K8sObject):
    """Linux capabilities added and dropped."""

    add: Annotated[list[StrictStr], MaxLen(MAX_ITEMS)] | None = Field(
        default=None, description="Capabilities added.")
    drop: Annotated[list[StrictStr], MaxLen(MAX_ITEMS)] | None = Field(
        default=None, description="Capabilities dropped (edl drops ALL by default).")


class _CommonSecurity(K8sObject):
    runAsUser: NonNegative64 | None = Field(default=None, description="The user ID.")
    runAsGroup: NonNegative64 | None = Field(default=None, description="The group ID.")
    runAsNonRoot: StrictBool | None = Field(
        default=None, description="Refuse to start a container as root (edl: true).")
    seccompProfile: SeccompProfile | None = Field(
        default=None, description="The seccomp profile (edl: RuntimeDefault).")
    seLinuxOptions: SELinuxOptions | None = Field(
        default=None, description="The SELinux context.")
    appArmorProfile: AppArmorProfile | None = Field(
        default=None, description="The AppArmor profile.")


class PodSecurityContext(_CommonSecurity):
    """The pod's securityContext, merged over edl's Pod Security `restricted` defaults."""

    fsGroup: NonNegative64 | None = Field(
        default=None, description="The group owning the pod's volumes.")
    fsGroupChangePolicy: Literal["OnRootMismatch", "Always"] | None = Field(
        default=None, description="OnRootMismatch or Always.")
    supplementalGroups: Annotated[list[NonNegative64], MaxLen(MAX_ITEMS)] | None = Field(
        default=None, description="More group IDs.")
    supplementalGroupsPolicy: Literal["Merge", "Strict"] | None = Field(
        default=None, description="Merge or Strict.")
    sysctls: Annotated[list[Sysctl], MaxLen(MAX_ITEMS)] | None = Field(
        default=None, description="Namespaced sysctls.")


class SecurityContext(_CommonSecurity):
    """A container's securityContext, merged over edl's Pod Security `restricted` defaults."""

    allowPrivilegeEscalation: StrictBool | None = Field(
        default=None, description="edl: false.")
    capabilities: Capabilities | None = Field(
        default=None, description="edl: drop ALL.")
    privileged: StrictBool | None = Field(default=None, description="Run privileged.")
    readOnlyRootFilesystem: StrictBool | None = Field(
        default=None, description="Mount the root filesystem read-only.")
    procMount: Literal["Default", "Unmasked"] | None = Field(
        default=None, description="Default or Unmasked.")

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule("!has(self.privileged) || !self.privileged || !has(self.allowPrivilegeEscalation) "
             "|| self.allowPrivilegeEscalation",
             "allowPrivilegeEscalation cannot be false when privileged is true",
             "allowPrivilegeEscalation",
             lambda s: not s.privileged or s.allowPrivilegeEscalation is not False),
    )


# -- env and references ----------------------------------------------------------------------


class ObjectFieldSelector(K8sObject):
    """A field of the pod (downward API)."""

    fieldPath: StrictStr = Field(description="metadata.name, status.podIP, ...")
    apiVersion: StrictStr | None = Field(default=None, description="Default v1.")


class ResourceFieldSelector(K8sObject):
    """A container's resource request or limit (downward API)."""

    resource: StrictStr = Field(description="limits.cpu, requests.memory, ...")
    containerName: StrictStr | None = Field(default=None, description="The container.")
    divisor: StrictStr | None = Field(default=None, description="The unit, e.g. 1Mi.")


class KeySelector(K8sObject):
    """A key of a ConfigMap or Secret."""

    name: Subdomain = Field(description="The object's name.")
    key: StrictStr = Field(description="The key.")
    optional: StrictBool | None = Field(default=None, description="May be missing.")


_ONE_SOURCE = " + ".join(
    f"(has(self.{f}) ? 1 : 0)"
    for f in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")
)


class EnvVarSource(K8sObject):
    """Where a variable's value comes from: exactly one source."""

    fieldRef: ObjectFieldSelector | None = Field(default=None, description="A pod field.")
    resourceFieldRef: ResourceFieldSelector | None = Field(
        default=None, description="A resource request or limit.")
    configMapKeyRef: KeySelector | None = Field(
        default=None, description="A ConfigMap key.")
    secretKeyRef: KeySelector | None = Field(default=None, description="A Secret key.")

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(f"{_ONE_SOURCE} == 1", "exactly one source must be set",
             "fieldRef", lambda s: sum(v is not None for v in
                           (s.fieldRef, s.resourceFieldRef, s.configMapKeyRef, s.secretKeyRef))
             == 1),
    )


class EnvVar(K8sObject):
    """An environment variable of the role's container (not the etcd sidecar)."""

    name: EnvName = Field(description="The name; those edl sets itself are refused.")
    value: StrictStr | None = Field(default=None, description="The value.")
    valueFrom: EnvVarSource | None = Field(
        default=None, description="Or where the value comes from.")

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule("!has(self.valueFrom) || !has(self.value) || self.value.size() == 0",
             "set value or valueFrom, not both",
             "valueFrom", lambda e: e.valueFrom is None or not e.value),
    )


class LocalObjectReference(K8sObject):
    """A reference to an object in the job's namespace (an image pull Secret)."""

    name: Subdomain = Field(description="The Secret's name.")

