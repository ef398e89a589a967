"""What one resize costs a job, as measured by its runtime and smoothed (pure).

A resize stops the job's progress for a while: a collective job restarting its
workers (and redoing the steps since its checkpoint), a live one re-forming its
process group, a parameter-server job's trainers being told the new count. The
runtime measures each pause (the old world's last step -> the new world's first
step, plus any work redone) and publishes it with its throughput records, with a
count of the resizes measured so far: records are merged (the last value of each
name wins), so the same pause is read many times and the count says when it is new.

`PauseEstimate` is the Autoscaler's smoothed figure per job: an exponentially
weighted moving average, so a job's pause follows load (restarts took 19-59 s on the
shared machine) without one slow resize deciding everything. `cooldown_s` turns a
pause into the time a job is left alone after a resize: long enough that pauses take
at most ``pause_share`` of its time, within [``low``, ``high``].
"""

from __future__ import annotations

from dataclasses import dataclass

from edl.throughput.records import MAX_COUNT, Field

__all__ = ["PAUSE", "RESIZES", "PauseEstimate", "cooldown_s", "ewma"]

MAX_PAUSE_S = 3600.0  # a resize pausing a job for over an hour is no resize: a broken record
PAUSE = Field(0.0, MAX_PAUSE_S)
RESIZES = Field(0.0, MAX_COUNT, integer=True)
WEIGHT = 0.3  # the newest pause's weight: about the last three resizes count


def ewma(previous: float | None, value: float, weight: float = WEIGHT) -> float:
    """The moving average with ``value`` folded in (the first value is taken as is)."""
    if previous is None:
        return value
    return previous + weight * (value - previous)


@dataclass
class PauseEstimate:
    """A job's smoothed resize pause (None until a first measurement)."""

    value: float | None = None
    folded: int = 0  # pauses folded in
    _seen: int | None = None  # the runtime's resize count last folded

    def observe(self, pause_s: float, resizes: int | None = None) -> bool:
        """Fold a published pause in; False when it was folded already (the same count,
        re-read from a merged record). A count that changes either way is a new pause
        (a restarted runtime counts from one again)."""
        if resizes is not None:
            if resizes == self._seen:
                return False
            self._seen = resizes
        self.value = ewma(self.value, pause_s)
        self.folded += 1
        return True


def cooldown_s(pause_s: float, pause_share: float, low: float, high: float) -> float:
    """Seconds between a job's resizes so its pauses take at most ``pause_share`` of its
    time, within [low, high]."""
    if pause_share <= 0:
        return high
    return min(high, max(low, pause_s / pause_share))
