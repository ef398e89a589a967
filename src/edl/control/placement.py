"""The plan's nodes for grown trainers, carried to the pods as preferred node affinity.

The policy grows a job onto concrete nodes (`Decision.placement`): the room it
counted is there. The scheduler, scoring on its own (spreading, say), may put the new
trainers elsewhere and leave the planned room as holes no later pod fits. So on a
growth the Autoscaler writes the planned nodes onto the trainer Job
(``edl.dev/trainer-placement``: ``{"parallelism": N, "nodes": [...], "stamp": t}``,
in the same write as the new parallelism), and edl's trainer controller gives each
trainer it then creates one of those nodes as a
``preferredDuringSchedulingIgnoredDuringExecution`` term on ``kubernetes.io/hostname``
(weight 100). A preference, never a requirement: if the plan went stale (the room was
taken meanwhile), the scheduler places the pod elsewhere rather than leave it pending.

Why an annotation on the Job, not memory shared by the two loops: the write that
raises parallelism carries it, so the controller never sees one without the other,
and it works where the two run apart (a restarted controller, ``kubectl``'s view).
Each annotation is used once (the controller remembers the last one it used per job;
a restarted controller may use the last one once more, harmless for a preference);
one for another parallelism is stale and ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edl.api.names import ANNOTATION_TRAINER_PLACEMENT, HOSTNAME_LABEL

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
PREFERENCE_WEIGHT = 100  # the most a term can weigh: the plan outranks softer wishes


@dataclass(frozen=True, slots=True)
class PlacementHint:
    token: str  # the annotation's text: used once
    parallelism: int
    nodes: tuple[str, ...]


def annotate(job: dict[str, Any], nodes: Sequence[str], parallelism: int, stamp: float) -> None:
    """Write the planned nodes of a growth to ``parallelism`` onto a trainer Job manifest
    (in place; the caller writes the Job)."""
    metadata = job.setdefault("metadata", {})
    annotations = dict(metadata.get("annotations") or {})
    annotations[ANNOTATION_TRAINER_PLACEMENT] = json.dumps(
        {"parallelism": parallelism, "nodes": list(nodes), "stamp": round(stamp, 3)},
        separators=(",", ":"))
    metadata["annotations"] = annotations


def hint(job: Mapping[str, Any]) -> PlacementHint | None:
    """The placement hint of a trainer Job for its current parallelism, if any.

    A malformed annotation (written by hand, say) is no hint: placement is an
    optimisation, and the trainers are created without it.
    """
    text = ((job.get("metadata") or {}).get("annotations") or {}).get(
        ANNOTATION_TRAINER_PLACEMENT)
    if not isinstance(text, str):
        return None
    try:
        data = json.loads(text)
        parallelism = int(data["parallelism"])
        listed = data["nodes"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        return None
    nodes = tuple(node for node in listed if node)
    if parallelism != int((job.get("spec") or {}).get("parallelism", -1)):
        return None  # written for another parallelism: stale
    return PlacementHint(text, parallelism, nodes)


def prefer_node(pod: dict[str, Any], node: str) -> dict[str, Any]:
    """The pod manifest with ``node`` added as a preferred node (its own affinity kept)."""
    spec = dict(pod.get("spec") or {})
    affinity = dict(spec.get("affinity") or {})
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    term = {"weight": PREFERENCE_WEIGHT, "preference": {"matchExpressions": [
        {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}]}}
    node_affinity[PREFERRED] = [*(node_affinity.get(PREFERRED) or ()), term]
    affinity["nodeAffinity"] = node_affinity
    spec["affinity"] = affinity
    return {**pod, "spec": spec}
