"""`JobParser`: validate a TrainingJob and parse it into child manifests (EDL's interface)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edl.api.trainingjob import TrainingJob
from edl.jobparser import collective_manifests as cm
from edl.jobparser import manifests
from edl.jobparser.validation import PodDefaults, validate_job

__all__ = ["DefaultJobParser", "JobParser"]


class JobParser:
    """Pure: every method maps a TrainingJob to plain data; nothing is sent anywhere.

    The `parse_to_*` methods validate first (it is cheap and idempotent), so they
    never emit a manifest for an invalid job and always see the defaults.

    ``managed_trainers`` False emits the trainer Job without ``spec.managedBy``, run by
    the cluster's Job controller: the design before issue 10, kept to measure it.
    ``defaults``: the images and trainer PriorityClass a job gets when it names none
    (`edl controller --image/--etcd-image/--trainer-priority-class`).
    """

    def __init__(
        self, managed_trainers: bool = True, defaults: PodDefaults | None = None
    ) -> None:
        self.managed_trainers = managed_trainers
        self.defaults = defaults or PodDefaults()

    def validate(self, job: TrainingJob | Mapping[str, Any]) -> TrainingJob:
        """The job with defaults filled; raises JobValidationError listing every problem."""
        return validate_job(job, self.defaults)

    def parse_to_master(self, job: TrainingJob | Mapping[str, Any]) -> dict[str, Any]:
        """`<job>-master` apps/v1 ReplicaSet (master + etcd sidecar unless external etcd)."""
        valid = self.validate(job)
        if valid.collective():
            return cm.master_replica_set(valid)
        return manifests.master_replica_set(valid)

    def parse_to_pserver(self, job: TrainingJob | Mapping[str, Any]) -> dict[str, Any]:
        """`<job>-pserver` apps/v1 ReplicaSet with `pserver.min-instance` replicas.

        Raises ValueError for a collective job, which has no pservers.
        """
        valid = self.validate(job)
        if valid.collective():
            raise ValueError("a collective TrainingJob has no pservers")
        return manifests.pserver_replica_set(valid)

    def parse_to_trainer(self, job: TrainingJob | Mapping[str, Any]) -> dict[str, Any]:
        """`<job>-trainer` batch/v1 Job with parallelism = `trainer.min-instance`."""
        valid = self.validate(job)
        if valid.collective():
            return cm.trainer_job(valid)
        return manifests.trainer_job(valid, managed=self.managed_trainers)

    def parse_to_service(self, job: TrainingJob | Mapping[str, Any]) -> dict[str, Any]:
        """`<job>-master` Service for the master and its etcd."""
        valid = self.validate(job)
        return cm.master_service(valid) if valid.collective() else manifests.master_service(valid)

    def parse_all(self, job: TrainingJob | Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every child in creation order: Service, master, pservers, trainers.

        A collective job has no pservers: Service, master (rendezvous), trainers.
        """
        valid = self.validate(job)
        if valid.collective():
            return [cm.master_service(valid), cm.master_replica_set(valid), cm.trainer_job(valid)]
        return [
            manifests.master_service(valid),
            manifests.master_replica_set(valid),
            manifests.pserver_replica_set(valid),
            manifests.trainer_job(valid, managed=self.managed_trainers),
        ]


DefaultJobParser = JobParser
"""PaddlePaddle EDL's name for its one JobParser implementation (``DefaultJobParser``).

PaddlePaddle EDL split an interface (``JobParser``) from its implementation; edl has one
implementation, so both names are the same class. A different parser only needs
the same five methods (the Controller takes any object that has them).
"""
