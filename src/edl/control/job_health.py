"""What a running job's own processes say of its health, as the Controller reports it.

The runtime knows things the API server does not: a pserver that cannot write its
checkpoint, a job whose progress has stopped moving. A `HealthSource` (on Kubernetes,
`edl.kube.health`, which reads the job's etcd) folds them into a `JobHealth`; the
Controller puts it in the status it writes (``status["health"]``), which becomes the
TrainingJob's ``CheckpointFailing`` and ``Stalled`` conditions and their Events
(`edl.kube.status`), and ends the job when its stall limit has passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from edl.api.trainingjob import TrainingJob
from edl.cluster.port import Cluster, Manifest
from edl.control.job_status import FAILED


@dataclass(frozen=True)
class JobHealth:
    checkpoint: str = ""  # who cannot checkpoint and what is at risk; "" when all save
    stall: str = ""  # the processes running without progress; "" when the job moves
    fatal: str = ""  # the stall limit has passed: why the job ends; "" otherwise

    def status(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "stall": self.stall}


class HealthSource(Protocol):
    def check(self, job: TrainingJob, running: bool) -> JobHealth:
        """The job's latest health, without waiting (``running``: trainers run now)."""
        ...

    def forget(self, namespace: str, name: str) -> None:
        """The job is gone or finished: drop what is kept of it."""
        ...


async def fold_health(
    source: HealthSource, cluster: Cluster, job: TrainingJob, trainer: Manifest,
    status: dict[str, Any], unfinished: bool, running: int,
) -> bool:
    """Put the job's health in ``status``; past its stall limit, stop its trainers (the
    trainer Job scaled to 0) and make ``status`` Failed for good (`finished_state`), so
    its master and pservers stop too. True when it ended the job."""
    health = source.check(job, unfinished and running > 0)
    status["health"] = health.status()
    if not (unfinished and health.fatal):
        return False
    trainer["spec"]["parallelism"] = 0
    await cluster.update_trainer_job(trainer)
    status.update(state=FAILED, message=health.fatal)
    return True
