"""A tick sees the room and the jobs' pods at one instant, however slow its API reads.

On Kubernetes the trainer Job is read from the API server while the pod caches keep
taking watch events. If the resources were read before that round trip and the pods
after it, a leaving trainer that exits meanwhile counts in the CPU requests but no
longer as leaving: the plan sees load that is gone and shrinks once more (found by
tests/e2e/test_fidelity.py on the real control plane).
"""

from __future__ import annotations

import asyncio
from typing import Any

from control.grown import grow_six_trainers, loops
from edl.cluster.inproc import InProcessCluster
from edl.policy import Decision

TERMINATION_S = 4.0


class SlowApiReads(InProcessCluster):
    """Reads of the trainer Job take `delay` seconds, as an API round trip does."""

    delay = 0.0

    async def get_trainer_job(self, job: Any) -> dict[str, Any]:
        found = await super().get_trainer_job(job)
        await asyncio.sleep(self.delay)
        return found


def test_a_trainer_leaving_during_the_api_read_is_counted_once(clock, manifests):
    cluster = SlowApiReads(clock, _pods(clock), placement="spread")
    for index in range(2):
        cluster.add_node(f"node-{index}", {"cpu": "16", "memory": "32Gi"})
    autoscaler, controller = loops(cluster)

    async def scenario():
        await grow_six_trainers(cluster, manifests, autoscaler, controller)
        await autoscaler._scale(Decision("default", "j", 6, 4, "test"))
        await asyncio.sleep(0.1)  # two trainers leave; they exit TERMINATION_S later
        cluster.delay = TERMINATION_S  # the read spans their exit
        resources, [view] = await autoscaler._observe()
        return resources, view, cluster.ledger.snapshot()

    resources, view, after = clock.run(scenario())
    assert view.parallelism == 4 and view.total == 4  # the leavers are gone ...
    assert resources.cpu_request_milli == after.cpu_request_milli  # ... from the room too


def _pods(clock):
    from edl.cluster.inproc.simulated_pods import Fixed, SimulatedPodRunner

    return SimulatedPodRunner(clock, start_latency=Fixed(2.0),
                              termination={"trainer": Fixed(TERMINATION_S)},
                              other_termination=Fixed(TERMINATION_S))
