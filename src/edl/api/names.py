"""Names every part of edl agrees on: label keys, roles, child names, the job key.

A TrainingJob ``NAME`` owns ``NAME-master`` (ReplicaSet and Service),
``NAME-pserver`` (ReplicaSet) and ``NAME-trainer`` (the trainer Job); each
child's pods carry ``edl.dev/job: NAME`` and ``edl.dev/role: <role>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LABEL_JOB = "edl.dev/job"
LABEL_ROLE = "edl.dev/role"
# TrainingJob annotations read by throughput-aware scaling (`edl.throughput.annotations`)
ANNOTATION_THROUGHPUT_PRIOR = "edl.dev/throughput-prior"
ANNOTATION_JOIN_COST = "edl.dev/join-cost-s"
# on a trainer Job: the nodes the Autoscaler's plan gave the trainers of its last growth
# (JSON, `edl.control.placement`); the trainer controller makes them preferred nodes
ANNOTATION_TRAINER_PLACEMENT = "edl.dev/trainer-placement"
# on a trainer Job of a job with spec.batch: the total batch the Autoscaler's policy
# chose; a torchrun job takes it when its world next re-forms (a resize or a failure), a
# live or PS job at its next step or task
ANNOTATION_BATCH_SIZE = "edl.dev/batch-size"
# the trainer pods the Autoscaler chose to leave on a shrink (edl's trainer controller deletes them)
ANNOTATION_TRAINER_VICTIMS = "edl.dev/trainer-victims"
# the node label kubelets set to the node's hostname (preferred-node affinity matches it)
HOSTNAME_LABEL = "kubernetes.io/hostname"

ROLE_MASTER = "master"
ROLE_PSERVER = "pserver"
ROLE_TRAINER = "trainer"
ROLES = (ROLE_MASTER, ROLE_PSERVER, ROLE_TRAINER)

JobKey = tuple[str, str]
"""(namespace, name) of a TrainingJob."""


def child_name(job_name: str, role: str) -> str:
    """The name of a job's child for one role (the Service shares the master's name)."""
    return f"{job_name}-{role}"


def trainer_job_name(job_name: str) -> str:
    """The name of the batch/v1 Job that runs a TrainingJob's trainers."""
    return child_name(job_name, ROLE_TRAINER)


def child_names(job_name: str) -> dict[str, str]:
    """The names of a job's children, by role."""
    return {role: child_name(job_name, role) for role in ROLES}


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of any manifest; namespace defaults to "default" as kubectl's does."""
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "default", metadata.get("name") or ""


def job_key(job: Any) -> JobKey:
    """(namespace, name) of a TrainingJob model or manifest dict."""
    if isinstance(job, Mapping):
        return object_key(job)
    metadata = job.metadata
    return metadata.namespace or "default", metadata.name or ""


def training_job_key(obj: object) -> JobKey | None:
    """(namespace, name) of a TrainingJob event's object; None if it cannot be addressed.

    Events come from outside (an API server, a test, a user's file). An object
    with no usable ``metadata.name`` can get neither a status nor children, so
    receivers skip it instead of letting it crash the watch that delivered it.
    """
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(metadata, Mapping):
        return None
    name, namespace = metadata.get("name"), metadata.get("namespace") or "default"
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        return None
    return namespace, name
