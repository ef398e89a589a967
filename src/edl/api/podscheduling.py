"""Where a role's pods may run: tolerations, affinity, topology spread (core/v1, checked).

Why typed models and not free-form maps: a wrong toleration operator or an unknown
affinity operator should be named by `edl validate` (and refused by the CRD) when the
job is submitted, not found later as pods the API server refuses. Each model is the
subset of its core/v1 type a pod needs, with Kubernetes' field names, so values are
copied into the pod templates unchanged (and edl's planner reads them from there).
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal

from annotated_types import MaxLen
from pydantic import Field, StrictInt, StrictStr

from edl.api.k8smodel import (
    MAX_ITEMS,
    MAX_TERMS,
    Int64,
    K8sObject,
    LabelMap,
    LabelValue,
    QualifiedName,
    Rule,
    Subdomain,
    Weight,
)

__all__ = [
    "Affinity",
    "LabelSelector",
    "NodeAffinity",
    "NodeSelectorRequirement",
    "PodAffinity",
    "PodAffinityTerm",
    "Toleration",
    "TopologySpreadConstraint",
]


# -- tolerations ---------------------------------------------------------------------------


class Toleration(K8sObject):
    """A toleration: the pod may run on nodes with a matching taint."""

    key: QualifiedName | None = Field(default=None, description="The taint key; empty with "
                                      "operator Exists tolerates every taint.")
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists or Equal (the default).")
    value: LabelValue | None = Field(default=None, description="The taint value (Equal only).")
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="The taint effect matched; empty matches every effect.")
    tolerationSeconds: Int64 | None = Field(
        default=None, description="How long a NoExecute taint is tolerated before eviction.")

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule("(has(self.key) && self.key.size() > 0) || (has(self.operator) && "
             "self.operator == 'Exists')", "operator must be Exists when key is empty",
             "operator", lambda t: bool(t.key) or t.operator == "Exists"),
        Rule("!has(self.operator) || self.operator != 'Exists' || !has(self.value) || "
             "self.value.size() == 0", "value must be empty when operator is Exists",
             "value", lambda t: t.operator != "Exists" or not t.value),
        Rule("!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
             "tolerationSeconds needs effect NoExecute",
             "tolerationSeconds", lambda t: t.tolerationSeconds is None or t.effect == "NoExecute"),
    )


# -- affinity ------------------------------------------------------------------------------

_VALUES_RULES = (
    Rule("!(self.operator in ['In', 'NotIn']) || (has(self.values) && self.values.size() > 0)",
         "values must be non-empty when operator is In or NotIn",
         "values", lambda r: r.operator not in ("In", "NotIn") or bool(r.values)),
    Rule("!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || "
         "self.values.size() == 0", "values must be empty when operator is Exists or DoesNotExist",
         "values", lambda r: r.operator not in ("Exists", "DoesNotExist") or not r.values),
)


def _one_integer(values: list[str] | None) -> bool:
    return len(values or []) == 1 and re.fullmatch(r"-?[0-9]+", (values or [""])[0]) is not None


class NodeSelectorRequirement(K8sObject):
    """A node label requirement: key, operator and values."""

    key: QualifiedName = Field(description="The node label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(
        description="In, NotIn, Exists, DoesNotExist, Gt or Lt.")
    values: Annotated[list[LabelValue], MaxLen(MAX_ITEMS)] | None = Field(
        default=None, description="The label values compared (one integer for Gt and Lt).")

    rules: ClassVar[tuple[Rule, ...]] = (
        *_VALUES_RULES,
        Rule("!(self.operator in ['Gt', 'Lt']) || (has(self.values) && self.values.size() == 1 "
             "&& self.values[0].matches('^-?[0-9]+$'))",
             "values must be one integer when operator is Gt or Lt",
             "values", lambda r: r.operator not in ("Gt", "Lt") or _one_integer(r.values)),
    )


class NodeFieldRequirement(K8sObject):
    """A node field requirement: only metadata.name, In or NotIn, one value."""

    key: Literal["metadata.name"] = Field(description="Only metadata.name.")
    operator: Literal["In", "NotIn"] = Field(description="In or NotIn.")
    values: Annotated[list[Subdomain], Field(min_length=1, max_length=1)] = Field(
        description="Exactly one node name.")


class NodeSelectorTerm(K8sObject):
    """Requirements ANDed together; terms are ORed."""

    matchExpressions: Annotated[list[NodeSelectorRequirement], MaxLen(MAX_ITEMS)] | None = Field(
        default=None, description="Node label requirements.")
    matchFields: Annotated[list[NodeFieldRequirement], MaxLen(MAX_ITEMS)] | None = Field(
        default=None, description="Node field requirements.")


class NodeSelector(K8sObject):
    """Required node affinity: one of the terms must match."""

    nodeSelectorTerms: Annotated[
        list[NodeSelectorTerm], Field(min_length=1, max_length=MAX_TERMS)
    ] = Field(description="The terms, ORed.")


class PreferredSchedulingTerm(K8sObject):
    """A weighted node preference."""

    weight: Weight = Field(description="1 to 100.")
    preference: NodeSelectorTerm = Field(description="The nodes preferred.")


class NodeAffinity(K8sObject):
    """Which nodes the pods must or should run on."""

    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None = Field(
        default=None, description="Nodes the pods may run on.")
    preferredDuringSchedulingIgnoredDuringExecution: Annotated[
        list[PreferredSchedulingTerm], MaxLen(MAX_TERMS)
    ] | None = Field(default=None, description="Nodes the pods prefer.")


class LabelSelectorRequirement(K8sObject):
    """A label requirement of a label selector."""

    key: QualifiedName = Field(description="The label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In, NotIn, Exists or DoesNotExist.")
    values: Annotated[list[LabelValue], MaxLen(MAX_ITEMS)] | None = Field(
        default=None, description="The label values (In and NotIn only).")

    rules: ClassVar[tuple[Rule, ...]] = _VALUES_RULES


class LabelSelector(K8sObject):
    """A label selector: matchLabels and matchExpressions, ANDed."""

    matchLabels: LabelMap | None = Field(default=None, description="Labels to match.")
    matchExpressions: Annotated[list[LabelSelectorRequirement], MaxLen(MAX_ITEMS)] | None = Field(
        default=None, description="Label requirements.")


_KEY_LIST = Annotated[list[QualifiedName], MaxLen(MAX_ITEMS)]


class PodAffinityTerm(K8sObject):
    """Pods (selected by labels) whose topology domain these pods join or avoid."""

    labelSelector: LabelSelector | None = Field(default=None, description="The other pods.")
    namespaces: Annotated[list[StrictStr], MaxLen(MAX_ITEMS)] | None = Field(
        default=None, description="Their namespaces (default: this one).")
    topologyKey: QualifiedName = Field(description="The node label of the domain.")
    namespaceSelector: LabelSelector | None = Field(
        default=None, description="Namespaces by label.")
    matchLabelKeys: _KEY_LIST | None = Field(
        default=None, description="Label keys whose values this pod's must match.")
    mismatchLabelKeys: _KEY_LIST | None = Field(
        default=None, description="Label keys whose values this pod's must not match.")


class WeightedPodAffinityTerm(K8sObject):
    """A weighted pod (anti-)affinity preference."""

    weight: Weight = Field(description="1 to 100.")
    podAffinityTerm: PodAffinityTerm = Field(description="The term.")


class PodAffinity(K8sObject):
    """Pod affinity or anti-affinity: required terms and weighted preferences."""

    requiredDuringSchedulingIgnoredDuringExecution: Annotated[
        list[PodAffinityTerm], MaxLen(MAX_TERMS)
    ] | None = Field(default=None, description="Terms every node must satisfy.")
    preferredDuringSchedulingIgnoredDuringExecution: Annotated[
        list[WeightedPodAffinityTerm], MaxLen(MAX_TERMS)
    ] | None = Field(default=None, description="Weighted preferences.")


class Affinity(K8sObject):
    """A pod's node affinity, pod affinity and pod anti-affinity."""

    nodeAffinity: NodeAffinity | None = Field(default=None, description="Node affinity.")
    podAffinity: PodAffinity | None = Field(default=None, description="Pod affinity.")
    podAntiAffinity: PodAffinity | None = Field(
        default=None, description="Pod anti-affinity.")


class TopologySpreadConstraint(K8sObject):
    """Spread the role's pods over a topology (zones, nodes)."""

    maxSkew: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] = Field(
        description="The largest allowed difference in matching pods between domains.")
    topologyKey: QualifiedName = Field(description="The node label of the domain.")
    whenUnsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(
        description="DoNotSchedule or ScheduleAnyway.")
    labelSelector: LabelSelector | None = Field(
        default=None, description="The pods counted (usually edl.dev/job and edl.dev/role).")
    minDomains: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)] | None = Field(
        default=None, description="Minimum number of domains (DoNotSchedule only).")
    nodeAffinityPolicy: Literal["Honor", "Ignore"] | None = Field(
        default=None, description="Honor or Ignore the pod's node affinity when counting.")
    nodeTaintsPolicy: Literal["Honor", "Ignore"] | None = Field(
        default=None, description="Honor or Ignore node taints when counting.")
    matchLabelKeys: _KEY_LIST | None = Field(
        default=None, description="Pod label keys added to the selector with this pod's values.")

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule("!has(self.minDomains) || self.whenUnsatisfiable == 'DoNotSchedule'",
             "minDomains needs whenUnsatisfiable DoNotSchedule",
             "minDomains",
             lambda c: c.minDomains is None or c.whenUnsatisfiable == "DoNotSchedule"),
    )

