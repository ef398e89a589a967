"""The Autoscaler and a collective job on the in-process control plane, on virtual time:
only allowed sizes, at most one resize per cooldown, no pserver ever created."""

from __future__ import annotations

import asyncio
from typing import Any

from edl.control.autoscaler import Autoscaler
from edl.control.controller import Controller


def collective(manifest: dict[str, Any], cooldown: int, **rules: Any) -> dict[str, Any]:
    spec = manifest["spec"]
    del spec["pserver"]
    spec["mode"] = "collective"
    spec["collective"] = {"resize-cooldown": cooldown, **rules}
    return manifest


def test_collective_job_resizes_in_allowed_steps_once_per_cooldown(
    clock, cluster_factory, manifests
) -> None:
    # one 8-core node: master 0.5 + trainers of 1 core; 7 would fit, multiples of 2 allowed
    cluster = cluster_factory(nodes=1, cpu="8", start=2.0, termination=2.0)
    job = collective(manifests.training_job("ddp", 2, 7, cpu="1"), 60, **{"world-size-multiple": 2})
    tenant = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "tenant"},
        "spec": {"replicas": 3, "template": manifests.pod_template("1", "1Gi", {"app": "t"})},
    }
    seen: list[tuple[float, int]] = []

    async def scenario() -> None:
        autoscaler = Autoscaler(cluster, interval=2.0)
        controller = Controller(cluster, autoscaler, status_interval=1.0)
        tasks = [asyncio.create_task(autoscaler.run()), asyncio.create_task(controller.run())]
        loop = asyncio.get_running_loop()
        cluster.create_training_job(job)
        await asyncio.sleep(0.1)  # the Controller creates the children
        for step in range(400):  # 200 s, sampled every 0.5 s
            if step == 20:
                cluster.create_deployment(tenant)  # at 10 s: the tenant needs 3 cores
            trainer = await cluster.get_trainer_job_by_name("default", "ddp-trainer")
            now, size = loop.time(), trainer["spec"]["parallelism"]
            if not seen or seen[-1][1] != size:
                seen.append((now, size))
            await asyncio.sleep(0.5)
        for task in tasks:
            task.cancel()

    clock.run(scenario())
    sizes = [size for _, size in seen]
    # grown to 6 (not 7) at once, shrunk to 4 (not 5) for the tenant
    assert sizes == [6, 4], seen
    grown_at, shrunk_at = seen[0][0], seen[1][0]
    assert grown_at < 1
    assert shrunk_at - grown_at >= 60, "the shrink waited for the cooldown"
    assert shrunk_at - grown_at < 66, "and came once the cooldown was over"
    assert cluster.replica_counts("Deployment", "default", "tenant").running == 3
    assert not [p for p in cluster.list_pods() if "pserver" in p["metadata"]["name"]]


def test_a_collective_job_is_priced_by_its_measured_pause_else_its_mode_default(
    cluster_factory,
) -> None:
    """Before a resize is measured the payback rule prices it at the mode's default
    (18 s restart, 1 s live); once measured, at the job's own smoothed pause."""
    from dataclasses import replace

    from edl.jobparser.collective import LIVE_RESIZE_PAUSE_S, RESTART_RESIZE_PAUSE_S
    from edl.policy.base import Scaling
    from edl.policy.collective import ResizeRule
    from edl.throughput.curve import UslCurve

    autoscaler = Autoscaler(cluster_factory(nodes=1, cpu="8"), interval=2.0)
    key = ("default", "ddp")
    autoscaler.collective.rules[key] = ResizeRule((1, 2), 60.0, RESTART_RESIZE_PAUSE_S)
    scaling = Scaling(UslCurve(10.0))
    priced = autoscaler._priced(key, scaling)
    assert priced is not None and priced.resize_pause_s == RESTART_RESIZE_PAUSE_S
    assert priced.pause_source.startswith("restart")
    autoscaler.collective.rules[key] = ResizeRule((1, 2), 5.0, LIVE_RESIZE_PAUSE_S, live=True)
    priced = autoscaler._priced(key, scaling)
    assert priced is not None and priced.resize_pause_s == LIVE_RESIZE_PAUSE_S
    measured = replace(scaling, resize_pause_s=0.15, pause_source="measured over 3 resizes")
    assert autoscaler._priced(key, measured) == measured
    assert autoscaler._priced(("default", "ps-job"), scaling) == scaling  # no pause known
