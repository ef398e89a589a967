"""`PodOptions`: the pod fields a TrainingJob sets for one role (`spec.master|pserver|trainer`).

Why per role and in Kubernetes' spellings: users of Kubeflow's and KubeRay's
operators set scheduling, identity and security per replica type, with the names
of the PodSpec (`nodeSelector`, `tolerations`, `affinity`, ...), and a GPU trainer
needs tolerations and a selector its master does not. A collective job's pods use
the same sections: the rendezvous pod (with its etcd) takes `spec.master`, the
agents take `spec.trainer`. Every field is optional; what edl does with each is in
`edl.jobparser.podtemplate` and docs/kubernetes.md.
"""

from __future__ import annotations

from typing import Annotated

from annotated_types import MaxLen
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from edl.api.k8smodel import MAX_ITEMS, MAX_TERMS, AnnotationMap, LabelMap, Subdomain
from edl.api.podcontainer import EnvVar, LocalObjectReference, PodSecurityContext, SecurityContext
from edl.api.podscheduling import Affinity, Toleration, TopologySpreadConstraint

__all__ = ["MAX_ENV", "POD_OPTION_FIELDS", "PodOptions"]

MAX_ENV = 256


class PodOptions(BaseModel):
    """Kubernetes pod fields for one role's pods (the base of the role sections)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    image: StrictStr | None = Field(
        default=None, description="The image of this role's edl container (default: spec.image).")
    node_selector: LabelMap | None = Field(
        default=None, alias="nodeSelector",
        description="Node labels the pods require (PodSpec nodeSelector).")
    tolerations: Annotated[list[Toleration], MaxLen(MAX_ITEMS)] | None = Field(
        default=None, description="Taints the pods tolerate (PodSpec tolerations).")
    affinity: Affinity | None = Field(
        default=None, description="Node and pod (anti-)affinity (PodSpec affinity).")
    priority_class_name: Subdomain | None = Field(
        default=None, alias="priorityClassName",
        description="The pods' PriorityClass (trainers: default from `edl controller "
                    "--trainer-priority-class`).")
    service_account_name: Subdomain | None = Field(
        default=None, alias="serviceAccountName",
        description="The pods' ServiceAccount; setting it mounts its token unless "
                    "automountServiceAccountToken is false.")
    automount_service_account_token: StrictBool | None = Field(
        default=None, alias="automountServiceAccountToken",
        description="Mount an API token (default: false, or the ServiceAccount's setting when "
                    "serviceAccountName is set).")
    security_context: PodSecurityContext | None = Field(
        default=None, alias="securityContext",
        description="The pod securityContext, merged over edl's restricted defaults "
                    "(runAsNonRoot, seccomp RuntimeDefault).")
    container_security_context: SecurityContext | None = Field(
        default=None, alias="containerSecurityContext",
        description="Every container's securityContext, merged over edl's restricted defaults "
                    "(no privilege escalation, capabilities drop ALL).")
    env: Annotated[list[EnvVar], MaxLen(MAX_ENV)] | None = Field(
        default=None, description="More environment variables for this role's edl container; "
                                  "names edl sets itself are refused.")
    labels: LabelMap | None = Field(
        default=None, description="Pod labels; keys under edl.dev/ are edl's and refused.")
    annotations: AnnotationMap | None = Field(default=None, description="Pod annotations.")
    topology_spread_constraints: Annotated[
        list[TopologySpreadConstraint], MaxLen(MAX_TERMS)
    ] | None = Field(
        default=None, alias="topologySpreadConstraints",
        description="How the pods spread over zones or nodes (PodSpec "
                    "topologySpreadConstraints).")
    image_pull_secrets: Annotated[list[LocalObjectReference], MaxLen(MAX_ITEMS)] | None = Field(
        default=None, alias="imagePullSecrets",
        description="Pull secrets added to spec.imagePullSecrets for this role's pods.")


# the YAML spelling of every pod option (for messages and the docs)
POD_OPTION_FIELDS = tuple(f.alias or name for name, f in PodOptions.model_fields.items())
