"""Creating a job's children fails: transient errors are retried without failing the
job; permanent ones fail it, and it recovers once the cause is gone."""

from __future__ import annotations

import asyncio

import pytest

from edl.cluster.port import ClusterError, is_permanent
from edl.control.controller import Controller


@pytest.mark.parametrize(("status", "detail", "permanent"), [
    (500, "HTTP 500: internal error", False),
    (504, "HTTP 504: failed calling webhook: context deadline exceeded", False),
    (429, "HTTP 429: too many requests", False),
    (None, "connection reset", False),
    (403, 'HTTP 403: pods "x" is forbidden: exceeded quota: compute', False),
    (403, "HTTP 403: jobs.batch is forbidden: User cannot create", True),
    (422, "HTTP 422: Job.batch is invalid", True),
    (400, "HTTP 400: bad request", True),
])
def test_permanent_errors_are_invalid_objects_and_refusals_but_quota(status, detail, permanent):
    assert is_permanent(ClusterError("Job", "default", "j", detail, status)) is permanent


def failing_create(cluster, errors):
    """Make create_job raise the queued errors first, then work."""
    original = cluster.create_job

    async def create_job(manifest):
        if errors:
            raise errors.pop(0)
        return await original(manifest)

    cluster.create_job = create_job


def test_transient_errors_are_retried_and_never_fail_the_job(clock, cluster_factory, manifests):
    cluster = cluster_factory(nodes=2, cpu="16")
    errors = [ClusterError("Job", "default", "j-trainer", "HTTP 503: unavailable", 503)
              for _ in range(3)]
    failing_create(cluster, errors)
    controller = Controller(cluster)
    states = []

    async def scenario():
        await controller.on_add(cluster.create_training_job(manifests.training_job("j")))
        for _ in range(20):
            states.append(dict(cluster.get_training_job("default", "j").get("status") or {}))
            await asyncio.sleep(1)
        return await cluster.get_trainer_job_by_name("default", "j-trainer")

    trainer = clock.run(scenario())
    assert trainer["spec"]["parallelism"] == 2
    assert all(s.get("state") != "Failed" for s in states)
    assert any("retrying" in s.get("message", "") for s in states)
    assert states[-1]["state"] in ("Created", "Running")


def test_a_permanent_error_fails_the_job_until_the_cause_is_gone(clock, cluster_factory,
                                                                  manifests):
    cluster = cluster_factory(nodes=2, cpu="16")
    errors = [ClusterError("Job", "default", "j-trainer", "HTTP 403: forbidden", 403)
              for _ in range(2)]
    failing_create(cluster, errors)
    controller = Controller(cluster)

    async def scenario():
        await controller.on_add(cluster.create_training_job(manifests.training_job("j")))
        failed = dict(cluster.get_training_job("default", "j")["status"])
        await asyncio.sleep(30)  # retries after 1 s, then 2 s: the second one works
        return failed, cluster.get_training_job("default", "j")["status"]

    failed, later = clock.run(scenario())
    assert failed["state"] == "Failed" and "forbidden" in failed["message"]
    assert later["state"] in ("Created", "Running")
