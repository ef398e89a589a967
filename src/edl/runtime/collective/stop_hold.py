"""A stop signal held back while a completed round's rank handshake runs.

Once a node's join of a round succeeds, the round's nodes exchange the workers'
master address through the round's store (still inside ``next_rendezvous``), then
each node's torch agent writes its role and the round's rank 0 assigns the global
ranks (``_assign_worker_ranks``). A node drained (SIGTERM) in between never writes its
part: the others wait for it until the store's read timeout (60 s), then their
torchrun fails, and its exit closes the rendezvous for every later joiner. So a stop
that arrives in that window is held until the handshake is done (milliseconds when
no other node is lost, at most the store's timeout), then raised as torch's own
`SignalException`, as a stop at any other moment is. The survivors then start their
workers and see the node gone at their next check (`handler`).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from torch.distributed.elastic.agent.server.api import SimpleElasticAgent
from torch.distributed.elastic.multiprocessing.api import SignalException

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# torch's workers' start would register its own handler for these, replacing this one
TORCH_SIGNALS_ENV = {"TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGHUP,SIGQUIT"}
MAX_HOLD_S = 90.0  # beyond the store's read timeout (60 s): never held for good


class StopHold:
    """SIGTERM/SIGINT raise `SignalException` at once, except between `begin` and `end`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.since: float | None = None  # when the hold began; None: not holding
        self.held: int | None = None  # the signal that arrived meanwhile

    def begin(self) -> None:
        self.since = self.clock()

    def end(self) -> None:
        """Stop holding; raise the held signal, if one came."""
        held, self.since, self.held = self.held, None, None
        if held is not None:
            raise _stop(held)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.since is not None and self.clock() - self.since < MAX_HOLD_S:
            self.held = signum
            return
        raise _stop(signum)


def _stop(signum: int) -> SignalException:
    return SignalException(f"Process {os.getpid()} got signal: {signum}",
                           sigval=signal.Signals(signum))


def install(hold: StopHold) -> None:
    """Take the stop signals with ``hold`` and end its hold when the ranks are assigned."""
    os.environ.update(TORCH_SIGNALS_ENV)
    for stop in STOP_SIGNALS:
        signal.signal(stop, hold.on_signal)
    assign = SimpleElasticAgent._assign_worker_ranks

    def assign_then_release(agent: SimpleElasticAgent, *args: Any, **kwargs: Any) -> Any:
        try:
            return assign(agent, *args, **kwargs)
        finally:
            hold.end()

    SimpleElasticAgent._assign_worker_ranks = assign_then_release  # type: ignore[method-assign]
