"""A job's declared scaling prior and join cost, read from its TrainingJob annotations.

Annotations, not spec fields: they are hints to one policy, optional, and need no
CRD change. ``edl.dev/throughput-prior`` is JSON, either
``{"per_trainer": 120, "serial": 0.05, "comm": 0.001}`` or
``{"points": {"1": 100, "2": 190, "4": 340}}``; ``edl.dev/join-cost-s`` a number.
A bad annotation is ignored with its reason (the job still runs; the policy then
learns from measurements alone).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from edl.api.names import ANNOTATION_JOIN_COST, ANNOTATION_THROUGHPUT_PRIOR
from edl.throughput.curve import Curve, PointsCurve, UslCurve

__all__ = ["curve_from_dict", "curve_to_dict", "read_hints"]


def curve_from_dict(data: Any) -> Curve:
    """A curve from its JSON form; ValueError naming what is wrong."""
    if not isinstance(data, Mapping):
        raise ValueError("must be a JSON object")
    if "points" in data:
        points = data["points"]
        if not isinstance(points, Mapping) or not points:
            raise ValueError("points must be a non-empty object {trainers: samples/s}")
        try:
            pairs = sorted((int(n), float(x)) for n, x in points.items())
        except (TypeError, ValueError):
            raise ValueError("points: keys must be trainer counts, values numbers") from None
        return PointsCurve(tuple(pairs))
    unknown = set(data) - {"per_trainer", "serial", "comm"}
    if unknown:
        raise ValueError(f"unknown keys: {', '.join(sorted(unknown))}")
    try:
        values = {key: float(data[key]) for key in ("per_trainer", "serial", "comm") if key in data}
    except (TypeError, ValueError):
        raise ValueError("per_trainer, serial and comm must be numbers") from None
    if "per_trainer" not in values or values["per_trainer"] <= 0:
        raise ValueError("per_trainer must be given and > 0")
    return UslCurve(**values)


def curve_to_dict(curve: Curve) -> dict[str, Any]:
    if isinstance(curve, PointsCurve):
        return {"points": {str(n): x for n, x in curve.points}}
    if isinstance(curve, UslCurve):
        return {"per_trainer": curve.per_trainer, "serial": curve.serial, "comm": curve.comm}
    raise TypeError(f"cannot write {type(curve).__name__}")


def read_hints(annotations: Mapping[str, str] | None) -> tuple[Curve | None, float, list[str]]:
    """(prior curve or None, join cost seconds, problems) from a job's annotations."""
    annotations = annotations or {}
    problems: list[str] = []
    prior: Curve | None = None
    text = annotations.get(ANNOTATION_THROUGHPUT_PRIOR)
    if text:
        try:
            prior = curve_from_dict(json.loads(text))
        except (ValueError, json.JSONDecodeError) as error:
            problems.append(f"{ANNOTATION_THROUGHPUT_PRIOR}: {error}")
    join = 0.0
    text = annotations.get(ANNOTATION_JOIN_COST)
    if text:
        try:
            join = float(text)
            if not math.isfinite(join) or join < 0:
                raise ValueError
        except ValueError:
            problems.append(f"{ANNOTATION_JOIN_COST}: must be a number of seconds >= 0")
            join = 0.0
    return prior, join, problems
