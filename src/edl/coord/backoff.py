"""Retry pauses that back off, and logging that thins out while a failure lasts.

Why: with etcd gone, a member that retried every 200 ms and logged each attempt
wrote ~570 lines in two minutes. Pauses now double up to `cap` (a restarted etcd
is found again within `cap` seconds), and only the 1st, 2nd, 4th, 8th, ...
failure in a row is logged, with the count.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Backoff:
    first: float = 0.2
    cap: float = 2.0
    failures: int = 0  # in a row

    def failed(self) -> tuple[float, bool]:
        """(pause before the next try, whether to log this failure)."""
        self.failures += 1
        pause = min(self.cap, self.first * 2 ** (self.failures - 1))
        return pause, self.failures & (self.failures - 1) == 0

    def succeeded(self) -> None:
        self.failures = 0
