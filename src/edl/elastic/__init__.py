"""`edl.elastic`: opt-in live resizing for collective jobs (``spec.collective.live: true``).

A script wraps its model and optimizer in a `State` and gives `ElasticLoop.run` one
step's work; the world then grows and shrinks between two steps inside the living
processes, the state copied from a surviving worker, nothing redone. See
docs/collective.md ("Live resizing"). Unmodified torchrun scripts do not need this.
"""

from edl.elastic.loop import Batch, ElasticLoop
from edl.elastic.state import Progress, State

__all__ = ["Batch", "ElasticLoop", "Progress", "State"]
