"""Time one plan of `goodput` against `default` on the same synthetic clusters.

The clusters are `bench/plan.py`'s; every job gets a random scaling curve (USL with
random serial/communication terms, or flat-beyond-8 points) and a join cost, so the
allocation does real work. Prints a markdown table; the ratio is goodput / default,
measured in the same run. Usage: ``python bench/goodput_plan.py [--quick]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from edl.policy.base import Scaling
from edl.throughput.curve import PointsCurve, UslCurve
from plan import median_seconds, synthetic


def with_curves(views, seed: int = 11):
    rng = random.Random(seed)
    out = []
    for view in views:
        if rng.random() < 0.3:
            curve = PointsCurve(((1, 40.0), (4, 150.0), (8, 260.0), (16, 270.0)))
        else:
            curve = UslCurve(rng.uniform(10, 50), rng.uniform(0, 0.1), rng.choice([0, 1e-4, 1e-3]))
        scaling = Scaling(curve, join_cost_s=rng.choice([0.0, 30.0]))
        out.append(dataclasses.replace(view, scaling=scaling))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat per case")
    args = parser.parse_args()
    warm_views, warm_resources = synthetic(100, 10)
    for name in ("default", "goodput"):  # imports and first-call costs out of the timing
        median_seconds(name, with_curves(warm_views), warm_resources, 1)
    print("| nodes | jobs | default (ms) | goodput (ms) | goodput / default |")
    print("|---:|---:|---:|---:|---:|")
    for nodes, jobs in [(100, 10), (100, 100), (1000, 100), (1000, 1000), (5000, 1000)]:
        views, resources = synthetic(nodes, jobs)
        views = with_curves(views)
        repeats = 1 if args.quick else 5
        default = median_seconds("default", views, resources, repeats)
        goodput = median_seconds("goodput", views, resources, repeats)
        print(f"| {nodes} | {jobs} | {default * 1000:.1f} | {goodput * 1000:.1f} "
              f"| {goodput / default:.2f} |", flush=True)


if __name__ == "__main__":
    main()
