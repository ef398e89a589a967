"""`reference`: the original EDL autoscaler's algorithm (scaleAllJobsDryRun), faithfully.

Jobs are sorted by fulfillment ((parallelism - min) / (max - min); 1 when
min = max), ties broken by trainer GPU limit, CPU request, memory request
(ascending; then namespace/name so the order is total). Rounds repeat until
nothing changes; each round gives +1 to every job, least fulfilled first, then
-1 to every job, most fulfilled first:

- scale up while the job is below max, the cluster has more free memory than
  one trainer requests, some node has the trainer's CPU and memory idle, CPU
  requests stay within max_load_desired of the total and (for GPU jobs) the GPU
  limits stay within the total;
- scale down (to min at the lowest) while CPU requests or GPU limits exceed
  max_load_desired of the total, or while the job is above max.

Only jobs whose trainers are all running are rescheduled, unless some job's
trainers are all pending (then every job is).

Fixes to the original, kept deliberately small (docs/architecture.md,
"Scaling policies"):

1. A planned trainer *took* its node's idle CPU and free memory away; the
   original *added* them (`NodesCPUIdleMilli[node] += cpu * additional`), so a
   node looked emptier the more trainers were planned on it.
2. A round that changes nothing in net (one job +1 and -1 in the same round,
   possible when GPU limits sit between max_load_desired x total and the total)
   ends the plan; the original could loop forever there.
3. Node search is first-fit in node order (Go's map order was random).
4. A job that is not rescheduled (trainers not all running) is still clamped
   into [min-instance, max-instance].
"""

from __future__ import annotations

from collections.abc import Sequence

from edl.accounting.types import ClusterResource
from edl.policy.base import Decision, JobView

__all__ = ["ReferencePolicy", "reference_order"]


def reference_order(job: JobView) -> tuple[float, int, int, int, str, str]:
    """The original's sort key: fulfillment, then GPU limit, CPU request, memory request."""
    return (
        job.fulfillment(),
        job.gpu_limit,
        job.cpu_request_milli,
        job.memory_request_mega,
        job.namespace,
        job.name,
    )


class _DryRun:
    """The mutable state of one scaleAllJobsDryRun: aggregate requests and per-node room."""

    def __init__(self, resources: ClusterResource, max_load_desired: float) -> None:
        self.gpu_limit = resources.gpu_limit
        self.gpu_total = resources.gpu_total
        self.cpu_request = resources.cpu_request_milli
        self.cpu_total = resources.cpu_total_milli
        self.memory_request = resources.memory_request_mega
        self.memory_total = resources.memory_total_mega
        self.cpu_cap = int(resources.cpu_total_milli * max_load_desired)
        self.gpu_cap = int(resources.gpu_total * max_load_desired)
        self.names = list(resources.nodes.cpu_idle_milli)
        self.cpu_idle = list(resources.nodes.cpu_idle_milli.values())
        memory = resources.nodes.memory_free_mega
        self.memory_free = [memory.get(name, 0) for name in self.names]
        # First-fit cursor per (cpu, memory) shape. Node room only shrinks during a
        # dry run (scale-down never gives room back, as in the original), so a node
        # that is too small for a shape stays too small and the cursor never rewinds.
        self.cursor: dict[tuple[int, int], int] = {}

    def search_assignable_node(self, cpu: int, memory: int) -> int:
        """Index of the first node with `cpu` idle and `memory` free, or -1."""
        shape = (cpu, memory)
        index = self.cursor.get(shape, 0)
        cpu_idle, memory_free, count = self.cpu_idle, self.memory_free, len(self.names)
        while index < count and not (cpu <= cpu_idle[index] and memory <= memory_free[index]):
            index += 1
        self.cursor[shape] = index
        return index if index < count else -1

    def scale(self, job: JobView, planned: int, scale_down: bool) -> tuple[int, str]:
        """The original's scaleDryRun for one job: (+1 | 0 | -1, why)."""
        cpu, memory, gpu = job.cpu_request_milli, job.memory_request_mega, job.gpu_limit
        if scale_down:
            if planned > job.max_instance:
                return self._apply(-1, cpu, memory, gpu, -1), "above max-instance"
            gpu_over = self.gpu_limit > self.gpu_cap
            cpu_over = self.cpu_request > self.cpu_cap
            if gpu_over or cpu_over:
                what = "CPU requests" if cpu_over else "GPU limits"
                if planned > job.min_instance:
                    return self._apply(-1, cpu, memory, gpu, -1), f"{what} above max load"
                return 0, f"{what} above max load, already at min-instance"
            return 0, ""
        if planned >= job.max_instance:
            return 0, "at max-instance"
        if self.memory_total - self.memory_request <= memory:
            return 0, "not enough free memory in the cluster"
        node = self.search_assignable_node(cpu, memory)
        if node < 0:
            return 0, f"no node has {cpu}m CPU idle and {memory}M memory free"
        cpu_fits = self.cpu_cap - self.cpu_request >= cpu
        if gpu > 0 and not (self.gpu_total - self.gpu_limit >= gpu):
            return 0, "not enough free GPUs"
        if not cpu_fits:
            return 0, "CPU requests would exceed max load"
        return self._apply(1, cpu, memory, gpu, node), "room on a node, CPU within max load"

    def _apply(self, additional: int, cpu: int, memory: int, gpu: int, node: int) -> int:
        self.gpu_limit += gpu * additional
        self.cpu_request += cpu * additional
        self.memory_request += memory * additional
        if node >= 0:  # fix 1: the planned trainer takes room from its node
            self.cpu_idle[node] -= cpu * additional
            self.memory_free[node] -= memory * additional
        return additional


class ReferencePolicy:
    """The original EDL algorithm (see the module doc for the fixes)."""

    name = "reference"

    def plan(
        self, jobs: Sequence[JobView], resources: ClusterResource, max_load_desired: float
    ) -> list[Decision]:
        have_pending = any(job.total > 0 and job.pending == job.total for job in jobs)
        movable = [
            job
            for job in jobs
            if job.elastic and (have_pending or job.total == job.running)
        ]
        movable.sort(key=reference_order)
        dry_run = _DryRun(resources, max_load_desired)
        diff = dict.fromkeys((job.key for job in movable), 0)
        acted: dict[tuple[str, str], str] = {}  # why it last moved
        stopped: dict[tuple[str, str], str] = {}  # why it last did not
        while True:
            before = dict(diff)
            changed = False
            for scale_down, order in ((False, movable), (True, movable[::-1])):
                for job in order:
                    key = job.key
                    additional, reason = dry_run.scale(job, job.parallelism + diff[key], scale_down)
                    if additional:
                        diff[key] += additional
                        changed = True
                    if additional:
                        acted[key] = reason
                    elif reason:
                        stopped[key] = reason
            if not changed or diff == before:  # fix 2: a net-zero round would repeat forever
                break

        decisions = []
        for job in jobs:
            key = job.key
            if not job.elastic:
                reason, target = job.fixed_reason(), job.clamped()
            elif key not in diff:
                # fix 4: even a job that is not rescheduled stays within [min, max]
                target = job.clamped()
                reason = "trainers not all running; not rescheduled"
                if target != job.parallelism:
                    reason = f"clamp {job.parallelism}->{target} to [min, max]; {reason}"
            else:
                target = job.parallelism + diff[key]
                stop = stopped.get(key, "nothing to change")
                if target == job.parallelism:
                    reason = f"keep {target}: {stop}"
                else:
                    verb = "scale up" if target > job.parallelism else "scale down"
                    reason = f"{verb} {job.parallelism}->{target}: {acted[key]}"
                    if target > job.parallelism:
                        reason += f"; then {stop}"
            decisions.append(Decision(job.namespace, job.name, job.parallelism, target, reason))
        return decisions
