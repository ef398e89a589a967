"""The batch a job that adapts it should run at, given the trainers a plan gave it.

Pure: a `Decision` and the job's `GoodputCurve` in, the decision with its batch out.
The batch changes only when the best batch for the new trainer count is predicted
``gain`` (5 %) faster than the one the job runs now — its last chosen batch, or its
declared per-trainer batch times its trainers if none was chosen — because AdaptDL
saw batches flap without such a threshold. A torchrun collective job takes it when its
world next re-forms (a resize or a failure), a live one (`edl.elastic`) at its next
step boundary, a parameter-server job at its trainers' next tasks (its master hands
out the per-trainer batch, `edl.runtime.master.batch`); the simulator as its
``batch_change`` says.
"""

from __future__ import annotations

import dataclasses

from edl.policy.base import Decision
from edl.throughput.batch import GoodputCurve, throughput_at
from edl.throughput.efficiency import efficiency

__all__ = ["with_batch"]


def with_batch(
    decision: Decision, curve: GoodputCurve, chosen: float | None, gain: float
) -> Decision:
    """``decision`` with ``batch`` set when the job should run a new one (or keep the
    one it was given); unchanged when its declared batch is near enough the best."""
    n = max(1, decision.target)
    best, value = curve.best(n)
    limits = curve.limits
    low, high = limits.bounds(n)
    current = limits.fixed(n) if chosen is None else min(high, max(low, chosen))
    kept = throughput_at(
        curve.throughput, n, current, limits.base, curve.compute_rate
    ) * efficiency(
        curve.noise_scale, limits.initial, current
    )
    if value <= kept * (1.0 + gain):
        if chosen is None:
            return decision  # runs its declared batch, near enough the best
        best = round(current)
    phi = "off" if curve.noise_scale is None else f"{curve.noise_scale:.0f}"
    eff = efficiency(curve.noise_scale, limits.initial, best)
    note = f"batch {best} (noise scale {phi}, efficiency {eff:.2f})"
    return dataclasses.replace(decision, batch=best, reason=f"{decision.reason}; {note}")
