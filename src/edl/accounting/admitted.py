"""What admission makes of a trainer pod, read from a server-side dry-run create (pure).

Why: the API server's admission changes a pod after edl wrote its template — a
LimitRange's `defaultRequest`/`default`, ExtendedResourceToleration's tolerations,
RuntimeClass's `overhead`, the Priority plugin's `priority`/`priorityClassName`, and
whatever a mutating webhook adds. kube-scheduler places the admitted pod, so the planner
sizes and places trainers from the dry-run's answer (`admitted_trainer`), not from the
template. What admission adds that the planner cannot model (`unmodelled`) holds the
job at its size with the reason in its status, rather than a plan that cannot land.
The kube shell (`edl.kube.dry_run`) makes the call; this module only reads dicts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edl.accounting.eligibility import PodConstraints, constraints_of, topology_problems
from edl.accounting.request import PodRequestError, pod_request
from edl.accounting.types import PodResources

__all__ = ["AdmittedTrainer", "admitted_trainer", "refused_trainer", "template_hash",
           "unmodelled"]


@dataclass(frozen=True, slots=True)
class AdmittedTrainer:
    """One trainer pod as the API server admits it; ``problem`` non-empty: the planner
    must not grow the job (admission refuses the pod, or adds what it cannot model)."""

    per_pod: PodResources | None = None
    constraints: PodConstraints | None = None
    priority_class: str = ""
    problem: str = ""


def template_hash(template: Mapping[str, Any]) -> str:
    """A stable digest of a pod template: the dry-run is redone when it changes."""
    text = json.dumps(template, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def refused_trainer(message: str) -> AdmittedTrainer:
    """The API server refused the dry-run create: no trainer of this template can exist."""
    return AdmittedTrainer(problem=f"the API server refuses trainer pods: {message}")


def _spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _claims(spec: Mapping[str, Any]) -> set[str]:
    """Names of the volumes that bind a PersistentVolumeClaim (their topology binds the pod)."""
    return {str(v.get("name")) for v in spec.get("volumes") or ()
            if isinstance(v, Mapping) and (v.get("persistentVolumeClaim") or v.get("ephemeral"))}


def unmodelled(template_spec: Mapping[str, Any], pod_spec: Mapping[str, Any],
               labels: Mapping[str, str]) -> list[str]:
    """What admission added to the pod that the planner cannot model, one phrase each.

    Only additions count: what the template itself carries is validation's to refuse.
    """
    found = []
    before = {path for path, _ in topology_problems(template_spec, labels)}
    for path, why in topology_problems(pod_spec, labels):
        if path not in before:
            where = ".".join(str(p) for p in path)
            found.append(f"spec.{where} ({why})")
    if pod_spec.get("schedulingGates") and not template_spec.get("schedulingGates"):
        found.append("spec.schedulingGates (a gated pod waits for whoever added the gate)")
    if pod_spec.get("nodeName") and not template_spec.get("nodeName"):
        found.append("spec.nodeName (every trainer bound to one node)")
    added = sorted(_claims(pod_spec) - _claims(template_spec))
    if added:
        found.append(f"spec.volumes {', '.join(added)} (a claim's volume topology)")
    if pod_spec.get("resourceClaims") and not template_spec.get("resourceClaims"):
        found.append("spec.resourceClaims (dynamic resource allocation)")
    return found


def admitted_trainer(template: Mapping[str, Any], pod: Mapping[str, Any]) -> AdmittedTrainer:
    """A trainer pod template and the dry-run's answer (the admitted pod) -> what the
    planner plans from: the admitted pod's requests (every container, init containers
    and overhead, as `pod_request`), its tolerations, nodeSelector and affinity, and its
    PriorityClass's name (quota scopes read it)."""
    template_spec, spec = _spec(template), _spec(pod)
    metadata = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    raw_labels = (metadata or {}).get("labels")
    labels = ({str(k): str(v) for k, v in raw_labels.items()}
              if isinstance(raw_labels, Mapping) else {})
    klass = str(spec.get("priorityClassName") or "")
    try:
        per_pod = pod_request(pod)
    except PodRequestError as error:
        return AdmittedTrainer(priority_class=klass,
                               problem=f"the admitted trainer pod's requests: {error}")
    added = unmodelled(template_spec, spec, labels)
    problem = ""
    if added:
        problem = ("admission adds to trainer pods what the planner cannot model: "
                   + "; ".join(added))
    return AdmittedTrainer(per_pod, constraints_of(spec, labels), klass, problem)
