"""Scenario sections for where pods may run and who yields: node taints and labels,
per-job/per-workload tolerations, node selectors, affinity and PriorityClass,
PriorityClasses and namespace ResourceQuotas. Kubernetes' own spellings inside."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from edl.sim.strict import Quantity, Strict

__all__ = ["PriorityClassSpec", "QuotaSpec", "Scheduling", "TaintSpec", "TolerationSpec"]

Effect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class TaintSpec(Strict):
    key: Annotated[str, Field(min_length=1)]
    value: str = ""
    effect: Effect

    def to_dict(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}


class TolerationSpec(Strict):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""

    @model_validator(mode="after")
    def _consistent(self) -> TolerationSpec:
        if self.operator == "Exists" and self.value:
            raise ValueError("operator Exists takes no value")
        if not self.key and self.operator != "Exists":
            raise ValueError("an empty key needs operator Exists")
        return self

    def to_dict(self) -> dict[str, str]:
        out: dict[str, str] = {"operator": self.operator}
        for name in ("key", "value", "effect"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out


class Scheduling(Strict):
    """Where a job's trainers (or a workload's pods) may go and their priority."""

    tolerations: list[TolerationSpec] = Field(default_factory=list)
    node_selector: dict[str, str] = Field(default_factory=dict)
    affinity: dict[str, Any] | None = None  # a Pod's `spec.affinity`, as written there
    priority_class: str | None = None

    def pod_fields(self) -> dict[str, Any]:
        """The Pod spec fields, in Kubernetes' spelling."""
        out: dict[str, Any] = {}
        if self.tolerations:
            out["tolerations"] = [t.to_dict() for t in self.tolerations]
        if self.node_selector:
            out["nodeSelector"] = dict(self.node_selector)
        if self.affinity:
            out["affinity"] = self.affinity
        if self.priority_class:
            out["priorityClassName"] = self.priority_class
        return out


class PriorityClassSpec(Strict):
    name: Annotated[str, Field(min_length=1)]
    value: Annotated[int, Field(ge=-2147483648, le=1000000000)]
    global_default: bool = False


class QuotaSpec(Strict):
    """A namespace's ResourceQuota: `hard` as in `spec.hard` (`requests.cpu`, `count/pods`),
    optionally only for pods of some PriorityClasses (a PriorityClass scopeSelector)."""

    name: Annotated[str, Field(min_length=1)]
    namespace: str = "default"
    hard: dict[str, Quantity]
    priority_classes: list[str] | None = None

    def manifest(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"hard": dict(self.hard)}
        if self.priority_classes is not None:
            spec["scopeSelector"] = {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In",
                 "values": list(self.priority_classes)}]}
        return {"apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
