"""A trainer pod as edl's trainer controller sees it, and the pods it makes (pure).

The controller claims a pod only if its controller ``ownerReference`` names the
trainer Job's UID (upstream's ``ClaimPods``), so a TrainingJob deleted and
recreated under the same name never counts the old incarnation's pods, and a
hand-labelled pod is never touched. Every pod it creates carries the annotation
``edl.dev/created-by: <installation>`` (`edl.api.installation`); a pod owned by the
Job without it was made by another writer (a kube-controller-manager ignoring
``spec.managedBy``, or another installation). A finished pod whose outcome is in
the Job's counters carries ``edl.dev/counted``.

Every pod it creates also carries the finalizer ``edl.dev/job-tracking`` (upstream's
``batch.kubernetes.io/job-tracking``, under edl's domain since the Job is managed by
edl): nobody (PodGC, the descheduler, a user's force delete) can remove a finished pod
before the controller has counted it. The finalizer goes in the same pod patch that
adds the counted mark, once the status holding the pod's UID is written; a pod that
does not count, an orphan and every pod of a finished Job lose it too.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edl.api.installation import current as installation

TRAINER_CONTAINER = "trainer"
ANNOTATION_CREATED_BY = "edl.dev/created-by"
ANNOTATION_COUNTED = "edl.dev/counted"
TRACKING_FINALIZER = "edl.dev/job-tracking"
# kube-controller-manager's: on pods it made for the Job before it honoured managedBy
KUBE_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
TRACKING_FINALIZERS = (TRACKING_FINALIZER, KUBE_TRACKING_FINALIZER)
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # upstream's generateName alphabet
NAME_SUFFIX_LEN = 5
# a pod's hostname is its name cut to 63 characters (a DNS label): like upstream's
# generateName, the base is cut so that the random suffix always stays in the name
MAX_POD_NAME = 63
DISRUPTION_REASONS = ("Evicted", "Preempting", "Terminated", "NodeLost", "Shutdown")


@dataclass(frozen=True)
class TrainerPodState:
    """One trainer pod as the rules need it (from a pod manifest: `pod_state`)."""

    name: str
    uid: str
    node: str | None
    phase: str  # Pending | Running | Succeeded | Failed
    deleting: bool  # deletionTimestamp set
    disrupted: bool  # DisruptionTarget condition True, or evicted/preempted by its reason
    exit_code: int | None  # the trainer container's terminated exit code, if any
    created_at: float
    started_at: float | None
    finished_at: float | None
    message: str = ""  # the trainer container's termination message
    owner_uid: str | None = None  # the controller ownerReference's uid
    ours: bool = True  # created by edl's trainer controller
    counted: bool = False  # its outcome is in the Job's counters
    ready: bool = False  # condition Ready True
    exits: tuple[tuple[str, int], ...] = ()  # (container, exit code) of terminated containers
    true_conditions: frozenset[str] = frozenset()
    tracked: bool = False  # holds a tracking finalizer (edl's, or kube-controller-manager's)
    deletion_asked_at: float | None = None  # deletionTimestamp less the grace period

    @property
    def failed_before_deletion(self) -> bool:
        """Its trainer container terminated no later than its deletion was asked for (in
        the same second counts: the API's times are whole seconds): a deletion did not
        end it. A pod with no terminated container (deleted before it ran, failed by
        PodGC) has no such time: its deletion ended it."""
        return (self.exit_code is not None and self.finished_at is not None
                and self.deletion_asked_at is not None
                and self.finished_at <= self.deletion_asked_at)

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def crashed(self) -> bool:
        """Failed on its own: not deleted by anyone, not disrupted."""
        return self.phase == "Failed" and not self.deleting and not self.disrupted


def pod_state(pod: Mapping[str, Any]) -> TrainerPodState:
    """A trainer pod manifest (Kubernetes or in-process) as the rules see it.

    Times are seconds: in-process manifests carry floats; Kubernetes' RFC 3339
    strings are converted by the adapter before this (``to_seconds``).
    """
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    exit_code, message, finished_at = None, "", None
    exits = []
    for container in status.get("containerStatuses") or ():
        terminated = (container.get("state") or {}).get("terminated")
        if terminated is None:
            continue
        code = int(terminated.get("exitCode", 0))
        exits.append((str(container.get("name") or ""), code))
        if container.get("name") == TRAINER_CONTAINER or exit_code is None:
            exit_code = code
            message = str(terminated.get("message") or "")
            finished_at = terminated.get("finishedAt", finished_at)
    true_conditions = frozenset(
        str(c.get("type")) for c in status.get("conditions") or () if c.get("status") == "True")
    disrupted = ("DisruptionTarget" in true_conditions
                 or status.get("reason") in DISRUPTION_REASONS)
    phase = str(status.get("phase") or "Pending")
    created = metadata.get("creationTimestamp") or 0.0
    if phase in ("Succeeded", "Failed") and finished_at is None:
        finished_at = status.get("finishedAt", created)
    annotations = metadata.get("annotations") or {}
    owner_uid = next((ref.get("uid") for ref in metadata.get("ownerReferences") or ()
                      if ref.get("controller")), None)
    deleted = metadata.get("deletionTimestamp")
    asked = (None if deleted is None
             else float(deleted) - float(metadata.get("deletionGracePeriodSeconds") or 0))
    return TrainerPodState(
        name=str(metadata.get("name", "")),
        uid=str(metadata.get("uid") or metadata.get("name", "")),
        node=(pod.get("spec") or {}).get("nodeName") or None,
        phase=phase,
        deleting=deleted is not None,
        disrupted=disrupted,
        exit_code=exit_code,
        created_at=float(created),
        started_at=None if status.get("startTime") is None else float(status["startTime"]),
        finished_at=None if finished_at is None else float(finished_at),
        message=message,
        owner_uid=owner_uid,
        ours=annotations.get(ANNOTATION_CREATED_BY) == installation(),
        counted=bool(annotations.get(ANNOTATION_COUNTED)),
        ready="Ready" in true_conditions,
        exits=tuple(exits),
        true_conditions=true_conditions,
        tracked=any(f in TRACKING_FINALIZERS for f in metadata.get("finalizers") or ()),
        deletion_asked_at=asked,
    )


def claimed(job: Mapping[str, Any], pods: list[TrainerPodState]) -> list[TrainerPodState]:
    """The pods whose controller is this very Job (by UID; a Job without one claims by
    name only in models that have no UIDs)."""
    uid = (job.get("metadata") or {}).get("uid")
    if not uid:
        return pods
    return [p for p in pods if p.owner_uid == uid]


def failure_action(spec: Mapping[str, Any], pod: TrainerPodState) -> str:
    """The Job's podFailurePolicy action for a failed pod (``FailJob``, ``Ignore``,
    ``Count``; the first matching rule, as upstream), ``Count`` when none matches."""
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or ():
        if _matches(rule, pod):
            action = str(rule.get("action") or "Count")
            return "Count" if action == "FailIndex" else action
    return "Count"


def _matches(rule: Mapping[str, Any], pod: TrainerPodState) -> bool:
    codes = rule.get("onExitCodes")
    if codes:
        container = codes.get("containerName")
        values = set(codes.get("values") or ())
        inside = codes.get("operator", "In") == "In"
        for name, code in pod.exits:
            if container not in (None, name) or code == 0:
                continue
            if (code in values) == inside:
                return True
        return False
    for pattern in rule.get("onPodConditions") or ():
        wanted = pattern.get("status", "True")
        present = pattern.get("type") in pod.true_conditions
        if (wanted == "True") == present:
            return True
    return False


def name_source(seed: str) -> random.Random:
    """Random pod-name suffixes, seeded (a simulation stays reproducible; a restarted
    controller seeds with its start time, so it never repeats an earlier run's names)."""
    return random.Random(seed)


def pod_name(job_name: str, rng: random.Random) -> str:
    """``<trainer Job>-<5 random characters>``, the base cut to 58 characters as
    upstream's generateName does: at most 63, so every trainer's hostname (the pod's
    name) is whole and as unique as its suffix."""
    suffix = "".join(rng.choice(NAME_ALPHABET) for _ in range(NAME_SUFFIX_LEN))
    return f"{job_name}-"[:MAX_POD_NAME - NAME_SUFFIX_LEN] + suffix


def trainer_pod(job: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A new trainer pod from the Job's template, owned (controller reference) by it."""
    metadata = job["metadata"]
    template = (job.get("spec") or {}).get("template") or {}
    template_meta = template.get("metadata") or {}
    reference = {"apiVersion": "batch/v1", "kind": "Job", "name": metadata["name"],
                 "controller": True, "blockOwnerDeletion": True}
    if metadata.get("uid"):
        reference["uid"] = metadata["uid"]
    annotations = dict(template_meta.get("annotations") or {})
    annotations[ANNOTATION_CREATED_BY] = installation()
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": metadata.get("namespace") or "default",
            "labels": dict(template_meta.get("labels") or {}),
            "annotations": annotations,
            "ownerReferences": [reference],
            "finalizers": [TRACKING_FINALIZER],
        },
        "spec": dict(template.get("spec") or {}),
    }
