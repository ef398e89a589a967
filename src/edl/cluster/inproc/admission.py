"""The in-process API server's admission objects: PriorityClasses, ResourceQuotas, and
pod-template defaults (a stand-in for a mutating webhook) — what `PodLifecycle._admit`
and `create_job` apply (docs/fidelity.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from edl.accounting.quota import quota_room
from edl.accounting.types import QuotaRoom
from edl.api.names import object_key
from edl.cluster.inproc.kubelet import PodLifecycle
from edl.cluster.inproc.store import copy_manifest
from edl.cluster.port import Manifest

__all__ = ["AdmissionObjects"]


class AdmissionObjects:
    """Mixed into `InProcessCluster` (which sets `pods` and `template_defaults`)."""

    pods: PodLifecycle
    template_defaults: dict[tuple[str, str], dict[str, Any]]

    def create_priority_class(self, name: str, value: int, global_default: bool = False) -> None:
        """A PriorityClass: pods naming it get ``spec.priority = value`` at creation."""
        self.pods.priority_classes[name] = value
        if global_default:
            self.pods.default_priority = value

    def create_resource_quota(self, quota: Mapping[str, Any]) -> None:
        """A ResourceQuota: pod creations that would exceed it are refused (403)."""
        quota_room(quota, from_spec=True)  # a bad quantity is refused now, not at admission
        namespace, name = object_key(quota)
        self.pods.quotas[(namespace, name)] = copy_manifest(dict(quota))

    def quota_rooms(self) -> tuple[QuotaRoom, ...]:
        """Every quota with `used` as the quota controller would write it now."""
        rooms = []
        for (namespace, name), quota in sorted(self.pods.quotas.items()):
            used = self.pods.quota_usage(namespace).get((namespace, name), {})
            rooms.append(replace(quota_room(quota, from_spec=True), used=used))
        return tuple(rooms)

    def set_pod_template_defaults(
        self, namespace: str, name: str, fields: Mapping[str, Any]
    ) -> None:
        """Pod spec fields (tolerations, nodeSelector, affinity, priorityClassName) merged
        into the pod template of the batch Job ``namespace/name`` when it is created.

        Why: the simulator gives a scenario job's trainers their scheduling fields this
        way, as a platform's mutating admission webhook would, so the trainer Job the
        Autoscaler reads carries them exactly as a TrainingJob's `spec.trainer` fields
        rendered into the template would.
        """
        self.template_defaults[(namespace, name)] = dict(fields)

    def with_template_defaults(self, job: Manifest) -> Manifest:
        defaults = self.template_defaults.get(object_key(job))
        if not defaults:
            return job
        job = copy_manifest(dict(job))
        template = job.setdefault("spec", {}).setdefault("template", {})
        template["spec"] = {**(template.get("spec") or {}), **copy_manifest(defaults)}
        return job
