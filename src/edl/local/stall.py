"""No silent hang: a running job whose progress does not move is said, and may be ended.

A script stuck in a loop (either mode) keeps its processes alive and the display
at ``Running … 0 samples/s`` for ever. `StallWatch` follows the job's progress
mark — a parameter-server job's pass and tasks done, a collective job's epoch,
metrics and rendezvous rounds — and, once it has not moved for the warning time
while trainers run, gives one line naming the trainers that are running without
progress; a second line when progress resumes; and with a limit, the reason that
ends the run. The warning time is ``--stall-warning`` or, by default, ten times
the longest gap between two moves seen so far, at least two minutes (a job's own
step time: an epoch of ten minutes is no stall). Pure: the caller passes the time.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

DEFAULT_FLOOR_S = 120.0
GAP_FACTOR = 10.0


@dataclass
class StallWatch:
    warn_after_s: float | None = None  # None: from the measured gaps
    limit_s: float | None = None  # None: never ends the run
    floor_s: float = DEFAULT_FLOOR_S
    limit_name: str = "--stall-limit"  # what sets the limit, as the lines name it
    _mark: Hashable | None = None
    _moved_at: float | None = None
    _longest_gap: float = 0.0
    _warned: bool = False

    @property
    def stalled(self) -> bool:
        """Whether the job is stalled now (warned, and no move since)."""
        return self._warned

    def threshold(self) -> float:
        """Seconds without a move that make a stall."""
        if self.warn_after_s is not None:
            return self.warn_after_s
        return max(self.floor_s, GAP_FACTOR * self._longest_gap)

    def observe(
        self, mark: Hashable, now: float, running: Sequence[str],
    ) -> tuple[list[str], str]:
        """(lines to print, the reason to end the run or ''), after one look at the job.

        ``running``: the trainer processes running now (none: not a stall, the job waits
        for something else — a scheduler, a replacement — which other lines say)."""
        lines: list[str] = []
        if self._moved_at is None or mark != self._mark or not running:
            if self._moved_at is not None and mark != self._mark:
                self._longest_gap = max(self._longest_gap, now - self._moved_at)
                if self._warned:
                    lines.append("progress again: the job moves")
            self._mark, self._moved_at, self._warned = mark, now, False
            return lines, ""
        still = now - self._moved_at
        names = ", ".join(running)
        if not self._warned and still >= self.threshold():
            self._warned = True
            limit = (f"; ends the run after {self.limit_s:.0f} s ({self.limit_name})"
                     if self.limit_s is not None else "")
            lines.append(f"no progress for {still:.0f} s: {names} running but not advancing "
                         f"(stuck in a loop? waiting on something?){limit}")
        if self.limit_s is not None and still >= self.limit_s:
            return lines, (f"stalled: no progress for {still:.0f} s ({self.limit_name} "
                           f"{self.limit_s:g}): {names}")
        return lines, ""
