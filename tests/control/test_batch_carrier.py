"""The Autoscaler hands a collective job's chosen batch to where its workers read it
(`Autoscaler.batches`, a `BatchPublisher`; on a run, the job's etcd): once per change,
retried when the sink does not take it, never for a job that is not collective (issue 22)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from edl.api.jobfile import load_trainingjob
from edl.control.autoscaler import Autoscaler
from edl.policy import Decision

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class Sink:
    def __init__(self) -> None:
        self.published: list[tuple[str, str, int]] = []
        self.up = True

    async def publish(self, namespace: str, name: str, batch: int) -> bool:
        if self.up:
            self.published.append((namespace, name, batch))
        return self.up


def test_each_chosen_batch_is_published_once_and_retried_until_taken() -> None:
    collective = load_trainingjob(EXAMPLES / "digits-adaptive" / "job.yaml")
    queue = load_trainingjob(EXAMPLES / "digits" / "job.yaml")
    scaler = Autoscaler(cluster=None, policy="goodput")  # type: ignore[arg-type]
    sink = Sink()
    scaler.batches.sink = sink
    ours = (collective.metadata.namespace or "default", collective.metadata.name)
    other = (queue.metadata.namespace or "default", queue.metadata.name)
    scaler._jobs = {ours: collective, other: queue}
    annotations = {ours: 64.0, other: 64.0}  # the trainer Jobs' annotations

    async def publish(decisions: list[Decision]) -> None:
        await scaler.batches.publish(annotations, decisions,
                                     lambda key: scaler._jobs[key].collective())

    asyncio.run(publish([]))
    asyncio.run(publish([]))
    assert sink.published == [(*ours, 64)]  # once; the queue job's workers read no batch

    grow = Decision(*ours, parallelism=1, target=2, reason="goodput", batch=128)
    sink.up = False
    asyncio.run(publish([grow]))
    sink.up = True
    asyncio.run(publish([grow]))
    assert sink.published == [(*ours, 64), (*ours, 128)]


def test_a_parameter_server_job_adapting_its_batch_gets_it_published_too() -> None:
    """Its pservers read the batch from the job's etcd and sum pushes up to it; a PS
    job without spec.batch reads none."""
    import yaml

    from edl.control.batch_publish import reads_batch
    from edl.jobparser import JobParser

    raw = yaml.safe_load((EXAMPLES / "digits" / "job.yaml").read_text())
    plain = JobParser().validate(raw)
    raw["spec"]["batch"] = {"initial": 64, "max": 512}
    adapting = JobParser().validate(raw)
    assert reads_batch(adapting) and not reads_batch(plain) and not reads_batch(None)
    sink = Sink()
    scaler = Autoscaler(cluster=None, policy="goodput")  # type: ignore[arg-type]
    scaler.batches.sink = sink
    jobs = {("default", "adapting"): adapting, ("default", "plain"): plain}
    decisions = [Decision(*key, parallelism=2, target=3, reason="goodput", batch=128)
                 for key in jobs]
    asyncio.run(scaler.batches.publish({}, decisions, lambda key: reads_batch(jobs[key])))
    assert sink.published == [("default", "adapting", 128)]
