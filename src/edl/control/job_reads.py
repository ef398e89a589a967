"""Pure readers of what the `Autoscaler` plans from: a TrainingJob and its trainer Job.

From the job's spec, a collective job's resize rule and the batch bounds; from
the trainer Job manifest, whether it is past scaling, the batch last written on
it, and its pod template's spec and labels. Each reads plain data (no cluster,
no I/O), so they live apart from the Autoscaler's loop and are tested alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edl.api.names import ANNOTATION_BATCH_SIZE
from edl.api.trainingjob import TrainingJob
from edl.cluster.port import Manifest
from edl.jobparser.collective import job_allowed_counts, resize_cooldown_s, resize_pause_s
from edl.policy.collective import ResizeRule
from edl.throughput.batch import BatchLimits, limits_from_spec

FINISHED = frozenset({"Complete", "Failed", "SuccessCriteriaMet", "FailureTarget"})


def trainer_job_done(trainer: Mapping[str, Any]) -> bool:
    """Whether a trainer Job is past scaling (pure).

    Only a terminal condition that is True counts (a resumed Job keeps
    ``Suspended=False``, a condition that says nothing of the end), and a trainer
    that succeeded means the work is done: a Job without completions creates no pod
    after that, so growing it would only raise a number.
    """
    status = trainer.get("status") or {}
    if int(status.get("succeeded") or 0) > 0:
        return True
    return any(
        c.get("type") in FINISHED and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def resize_rule(job: TrainingJob) -> ResizeRule | None:
    """A collective job's allowed trainer counts and cooldown; None for other jobs."""
    if not job.collective() or job.spec.collective is None:
        return None
    return ResizeRule(job_allowed_counts(job), resize_cooldown_s(job), resize_pause_s(job),
                      bool(job.spec.collective.live))


def batch_limits(job: TrainingJob) -> BatchLimits | None:
    """A job's batch bounds from ``spec.batch`` (None: it does not adapt its batch)."""
    batch = job.spec.batch
    if batch is None:
        return None
    return limits_from_spec(
        batch.initial, batch.max, batch.per_trainer_max, int(job.spec.trainer.min_instance or 1)
    )


def chosen_batch(trainer: Manifest) -> float | None:
    """The batch the Autoscaler last wrote on a trainer Job (None: none, or unreadable)."""
    text = ((trainer.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_BATCH_SIZE)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def trainer_pod_labels(trainer: Mapping[str, Any]) -> Mapping[str, str]:
    """The trainer Job's pod template labels (its topology rules select by them)."""
    template = (trainer.get("spec") or {}).get("template") or {}
    metadata = template.get("metadata") if isinstance(template, Mapping) else None
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def trainer_pod_spec(trainer: Mapping[str, Any]) -> Mapping[str, Any]:
    """The trainer Job's pod template spec: every trainer pod's constraints and requests
    ({} when the Job has none, or an odd shape)."""
    template = (trainer.get("spec") or {}).get("template") or {}
    spec = template.get("spec") if isinstance(template, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}
