"""Job throughput against trainer count: scaling curves, their online fit, observations.

Pure core: the simulator's work model, the runtime's published measurements and the
`goodput` policy all speak these types.
"""

from edl.throughput.curve import Curve, PointsCurve, UslCurve, scaled
from edl.throughput.fit import MIN_DISTINCT_COUNTS, Observation, OnlineFit, fit_usl

__all__ = [
    "MIN_DISTINCT_COUNTS",
    "Curve",
    "Observation",
    "OnlineFit",
    "PointsCurve",
    "UslCurve",
    "fit_usl",
    "scaled",
]
