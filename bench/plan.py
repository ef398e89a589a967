"""Time one plan of `default` and `reference` on synthetic clusters (same inputs, same run).

Clusters of 100, 1,000 and 5,000 nodes crossed with 10, 100 and 1,000 elastic
jobs (max 100 trainers each). Nodes are 16/32/64 cores (a tenth with 4 GPUs),
system pods hold ~5 % of every node, each job's current trainers are already
placed (random parallelism in [min, max]), and 1 % as many service pods as
nodes wait for room. Each case is timed a few times; the median is reported.
Target: 5,000 nodes x 1,000 jobs planned by `default` in < 0.5 s. Every view says
where its trainers run (`JobView.trainers`). Then: what knowing placement costs
(per-node preemption and fair-share pools): the largest case with `trainers=None`;
and what constraints cost: the largest case with 20 labelled node pools, the GPU
pools tainted, every node's `pods` allocatable counted, GPU jobs tolerating the taint
and selecting a GPU pool, 40 % of CPU jobs selecting one CPU pool, against the same
cluster and jobs without constraints, in the same run (target: <= 100 ms idle).

Run: .venv/bin/python bench/plan.py [--quick] [--constraints N]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from dataclasses import replace

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from edl.accounting import ClusterResource, NodeCapacity, PodResources, ResourceLedger
from edl.accounting.eligibility import (
    NO_CONSTRAINTS,
    NodeFacts,
    PodConstraints,
    Taint,
    Toleration,
)
from edl.policy import JobView, Trainer, get_policy

MAX_LOAD = 0.97
CONSTRAINED_TARGET_S = 0.1  # the constrained 5,000 x 1,000 case, on an idle machine
# trainer shapes: (cpu milli, memory mega, gpus)
SHAPES = [(1000, 2000, 0), (2000, 4000, 0), (4000, 8000, 0), (5000, 8590, 0), (2000, 8000, 1)]
SERVICE = PodResources(3000, 3000, 3222, 3222, 0, 0)


POOLS = 20
GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
TOLERATE_GPU = (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)


def synthetic(
    nodes: int, jobs: int, seed: int = 7, constrained: bool = False
) -> tuple[list[JobView], ClusterResource]:
    """A consistent cluster: pods placed on nodes with room, the rest pending.

    ``constrained``: node i is in pool i % 20 (label `pool`), the GPU nodes (every
    tenth: pools 0 and 10) are tainted, every node takes at most 110 pods; GPU jobs
    tolerate the taint and select one GPU pool, 40 % of CPU jobs select one CPU pool.
    """
    rng = random.Random(seed * 1_000_003 + nodes * 7 + jobs)
    ledger = ResourceLedger()
    room: list[list[int]] = []
    names = []
    for i in range(nodes):
        cores = rng.choice((16, 32, 64))
        gpus = 4 if i % 10 == 0 else 0
        name = f"node-{i:05d}"
        names.append(name)
        if constrained:
            facts = NodeFacts(name, (("kubernetes.io/hostname", name), ("pool", f"p{i % POOLS}")),
                              (GPU_TAINT,) if gpus else ())
            ledger.set_node(name, NodeCapacity(cores * 1000, cores * 4000, gpus, (("pods", 110),)),
                            facts=facts)
        else:
            ledger.set_node(name, NodeCapacity(cores * 1000, cores * 4000, gpus))
        system = cores * 50  # ~5 % of the node's CPU
        ledger.set_pod_resources(
            "kube-system", f"sys-{i}", PodResources(system, system, 500, 500), node=name
        )
        room.append([cores * 1000 - system, cores * 4000 - 500, gpus])

    def bind(cpu: int, memory: int, gpu: int, pool: int | None = None) -> str:
        for _ in range(8):  # a few random tries, like a spreading scheduler
            i = rng.randrange(nodes)
            if pool is not None:  # a node of its pool
                i = (i - i % POOLS + pool) if i - i % POOLS + pool < nodes else pool
            r = room[i]
            if r[0] >= cpu and r[1] >= memory and r[2] >= gpu:
                r[0] -= cpu
                r[1] -= memory
                r[2] -= gpu
                return names[i]
        return ""

    views = []
    for j in range(jobs):
        cpu, memory, gpu = rng.choice(SHAPES)
        lo = rng.randint(1, 10)
        hi = rng.randint(lo + 1, 100)
        parallelism = rng.randint(lo, hi)
        running = pending = 0
        per_pod = PodResources(cpu, cpu, memory, memory, gpu, gpu)
        constraints = NO_CONSTRAINTS
        pool: int | None = None
        if constrained and gpu:
            pool = rng.choice((0, 10))
            constraints = PodConstraints(TOLERATE_GPU, (("pool", f"p{pool}"),))
        elif constrained and rng.random() < 0.4:
            pool = rng.choice([p for p in range(POOLS) if p not in (0, 10)])
            constraints = PodConstraints((), (("pool", f"p{pool}"),))
        elif constrained:
            pool = rng.choice([p for p in range(POOLS) if p not in (0, 10)])  # untainted
        trainers = []
        for k in range(parallelism):
            node = bind(cpu, memory, gpu, pool)
            ledger.set_pod_resources("ns", f"job{j}-{k}", per_pod, node=node, trainer=True)
            trainers.append(Trainer(f"job{j}-{k}", node))
            running += bool(node)
            pending += not node
        views.append(
            JobView(
                "ns", f"job{j}", lo, hi, parallelism,
                cpu_request_milli=cpu, cpu_limit_milli=cpu,
                memory_request_mega=memory, memory_limit_mega=memory,
                gpu_request=gpu, gpu_limit=gpu,
                total=parallelism, running=running, pending=pending, unscheduled=pending,
                trainers=tuple(trainers), constraints=constraints,
            )
        )  # fmt: skip
    for s in range(max(1, nodes // 100)):
        ledger.set_pod_resources("web", f"nginx-{s}", SERVICE)
    return views, ledger.snapshot()


def median_seconds(policy_name: str, views, resources, repeats: int) -> float:
    policy = get_policy(policy_name)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        policy.plan(views, resources, MAX_LOAD)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat per case")
    parser.add_argument("--constraints", type=int, metavar="N", default=0,
                        help="only the constrained case against the unconstrained one, "
                             "N interleaved repeats each")
    args = parser.parse_args()
    if args.constraints:
        constraint_cost(Console(), args.constraints)
        return
    cases = [(n, j) for n in (100, 1000, 5000) for j in (10, 100, 1000)]
    console = Console()
    rows = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("planning", total=len(cases))
        for nodes, jobs in cases:
            progress.update(task, description=f"{nodes} nodes x {jobs} jobs")
            views, resources = synthetic(nodes, jobs)
            repeats = 1 if args.quick else (5 if nodes * jobs >= 1_000_000 else 9)
            default = median_seconds("default", views, resources, repeats)
            reference = median_seconds("reference", views, resources, repeats)
            trainers = sum(v.parallelism for v in views)
            changed = tuple(
                sum(1 for d in get_policy(name).plan(views, resources, MAX_LOAD) if d.diff)
                for name in ("default", "reference")
            )
            rows.append((nodes, jobs, trainers, changed, default, reference))
            progress.advance(task)

    table = Table(title=f"One plan, median of repeats (max_load_desired {MAX_LOAD})")
    for column in (
        "nodes",
        "jobs",
        "trainers",
        "jobs changed (default / reference)",
        "default",
        "reference",
        "default / reference",
    ):
        table.add_column(column, justify="right")
    markdown = [
        "| nodes | jobs | trainers | jobs changed (default / reference) | default (ms) "
        "| reference (ms) "
        "| default / reference |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for nodes, jobs, trainers, changed, default, reference in rows:
        ratio = default / reference if reference else float("inf")
        table.add_row(
            f"{nodes:,}", f"{jobs:,}", f"{trainers:,}", f"{changed[0]:,} / {changed[1]:,}",
            f"{default * 1000:.1f} ms", f"{reference * 1000:.1f} ms", f"{ratio:.2f}",
        )  # fmt: skip
        markdown.append(
            f"| {nodes:,} | {jobs:,} | {trainers:,} | {changed[0]:,} / {changed[1]:,} "
            f"| {default * 1000:.1f} "
            f"| {reference * 1000:.1f} | {ratio:.2f} |"
        )
    console.print(table)
    print("\n".join(markdown))
    largest = rows[-1][4]
    verdict = "meets" if largest < 0.5 else "MISSES"
    console.print(
        f"default on 5,000 nodes x 1,000 jobs: {largest * 1000:.0f} ms "
        f"({verdict} the 500 ms target)"
    )
    placement_cost(console, 1 if args.quick else 5)
    constraint_cost(console, 1 if args.quick else 9)


def constraint_cost(console: Console, repeats: int) -> None:
    """What constraints cost: the largest case with pools, taints, selectors and the
    `pods` allocatable, against the same jobs and nodes without them (target: 100 ms
    with constraints, on an idle machine). Wall and CPU time are both shown: on a
    loaded machine the wall time counts the waits for a core, the CPU time does not."""
    views, resources = synthetic(5000, 1000, constrained=True)
    # the very same jobs and nodes, every constraint (and the pods count) left out
    plain_views = [replace(view, constraints=NO_CONSTRAINTS) for view in views]
    plain = replace(resources, nodes=replace(resources.nodes, facts={}, extended_free={}))
    # interleaved, so both see the same load on a shared machine
    policy = get_policy("default")
    walls: tuple[list[float], list[float]] = ([], [])
    cpus: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for k, inputs in enumerate(((views, resources), (plain_views, plain))):
            start, cpu = time.perf_counter(), time.process_time()
            policy.plan(*inputs, MAX_LOAD)
            walls[k].append(time.perf_counter() - start)
            cpus[k].append(time.process_time() - cpu)
    constrained, unconstrained = (statistics.median(w) for w in walls)
    constrained_cpu, unconstrained_cpu = (statistics.median(c) for c in cpus)
    verdict = "meets" if constrained <= CONSTRAINED_TARGET_S else "MISSES"
    console.print(
        f"constraints on 5,000 nodes x 1,000 jobs ({POOLS} pools, GPU pools tainted, "
        f"selectors, pods allocatable): {constrained * 1000:.1f} ms with "
        f"({constrained_cpu * 1000:.1f} ms CPU), {unconstrained * 1000:.1f} ms without "
        f"({unconstrained_cpu * 1000:.1f} ms CPU); ratio {constrained / unconstrained:.2f}; "
        f"{verdict} the {CONSTRAINED_TARGET_S * 1000:.0f} ms target "
        f"(load average {os.getloadavg()[0]:.1f})"
    )


def placement_cost(console: Console, repeats: int) -> None:
    """What planning per node costs: the largest case with placement unknown."""
    views, resources = synthetic(5000, 1000)
    shrinking = sum(
        1 for d in get_policy("default").plan(views, resources, MAX_LOAD) if d.diff < 0
    )
    with_placement = median_seconds("default", views, resources, repeats)
    blind = [replace(view, trainers=None) for view in views]
    without = median_seconds("default", blind, resources, repeats)
    console.print(
        f"placement on 5,000 nodes x 1,000 jobs ({shrinking} shrinking decisions): "
        f"{with_placement * 1000:.1f} ms with, {without * 1000:.1f} ms without "
        f"(ratio {with_placement / without:.2f})"
    )


if __name__ == "__main__":
    main()
