"""A parameter-server job's gradient noise scale from its shards' estimates (pure).

Each pserver holds a shard of the parameters and estimates, from the pushes it sums
into updates (`edl.runtime.pserver.aggregate`), |G|² and the gradient variance of its
own coordinates. Squared norms add over coordinates, so the job's are the sums over
shards; φ, the batch's efficiency and AdaScale's gain follow as in collective mode
(`edl.throughput.efficiency`). The master merges this into the progress it publishes
(where `edl run` and the controller read a job's throughput, batch and φ), and every
pserver scales its learning rate by the same job-wide gain. The records come from
other processes: every value is checked first (`edl.throughput.records`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from edl.throughput.efficiency import adascale_gain, efficiency
from edl.throughput.records import COUNT, NORM, POSITIVE_BATCH, Field, clean, finite

__all__ = ["combine_shards", "job_estimate", "parse_records"]

_MIN_VAR = 1e-12  # as `NoiseScaleEstimator.var`
SOURCE = "pserver noise-scale record"
SHARD_FIELDS: dict[str, Field] = {
    "batch": POSITIVE_BATCH, "initial_batch": POSITIVE_BATCH, "var": NORM, "sqr": NORM,
    "updates": COUNT, "skipped": COUNT,
}


def parse_records(values: Iterable[bytes | str]) -> list[dict[str, Any]]:
    """The shards' JSON records as read from etcd (an unreadable one is left out)."""
    out = []
    for raw in values:
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def job_estimate(records: Iterable[Mapping[str, Any]]) -> tuple[float, float] | None:
    """(variance, |G|²) summed over the shards that have measured (None: none has).

    The shards publish their unclipped averages (a part's estimate may dip below zero);
    the sums are clipped as one estimator clips its own (variance to a tiny positive
    floor, |G|² to zero)."""
    var = sqr = 0.0
    measured = 0
    for record in records:
        v, s = NORM.read(record.get("var")), NORM.read(record.get("sqr"))
        if v is None or s is None:
            continue
        var += v
        sqr += s
        measured += 1
    return (max(var, _MIN_VAR), max(sqr, 0.0)) if measured else None


def combine_shards(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The job's figures from its shards' records: ``batch`` (the batch its updates are
    summed to), ``initial_batch``, and once measured ``noise_scale`` (φ, samples),
    ``efficiency`` of the batch and ``gain`` (``noise_unresolved`` instead of the first
    two while the summed |G|² estimate is not positive); {} when no shard has published."""
    usable = [clean(r, SHARD_FIELDS, SOURCE) for r in records if isinstance(r, Mapping)]
    batches = [r["batch"] for r in usable if "batch" in r]
    initials = [r["initial_batch"] for r in usable if "initial_batch" in r]
    if not batches or not initials:
        return {}
    batch, initial = max(batches), max(initials)
    # every shard sees every push and makes the same updates: the counts are per shard
    out: dict[str, Any] = {"batch": batch, "initial_batch": initial, "shards": len(usable),
                           "updates": max(int(r.get("updates", 0)) for r in usable),
                           "skipped": max(int(r.get("skipped", 0)) for r in usable)}
    estimate = job_estimate(usable)
    if estimate is None:
        return out
    var, sqr = estimate
    adaptive = any(r.get("adaptive") is True for r in records if isinstance(r, Mapping))
    gain = adascale_gain(var, sqr, batch / initial, adaptive=adaptive)
    if finite(gain, SOURCE, "gain"):
        out["gain"] = round(gain, 4)
    if sqr <= 0:  # measured, but the noise hides |G|²: φ is beyond what the updates resolve
        out["noise_unresolved"] = True
        return out
    phi = initial * var / sqr
    if finite(phi, SOURCE, "noise_scale"):
        out["noise_scale"] = round(phi, 2)
        out["efficiency"] = round(efficiency(phi, initial, batch), 4)
    return out
