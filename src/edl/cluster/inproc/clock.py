"""Clocks for the in-process control plane: the event loop's own time, real or virtual.

Why an event loop and not a hand-rolled timer heap: the Controller and the
Autoscaler are ordinary asyncio code (`asyncio.sleep`, `asyncio.wait_for`,
queues). Running them on an event loop whose ``time()`` is virtual, and which
jumps straight to the next timer whenever nothing is ready, makes virtual time
need no special case anywhere: the same code runs against Kubernetes on a real
loop. asyncio already keeps its timers in a heap, so this *is* a discrete-event
simulator, with coroutines as processes.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class VirtualTimeDeadlock(RuntimeError):
    """Every task waits and no timer is scheduled: virtual time can never advance."""


class _VirtualSelector(selectors.SelectSelector):
    """A selector that never waits: a poll with a timeout advances virtual time instead."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualEventLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self.loop
        assert loop is not None
        if timeout is None:
            raise VirtualTimeDeadlock(
                f"virtual time {loop.time():.3f}: every task is waiting and no timer is set"
            )
        if timeout > 0:
            loop.advance_to_next_timer(timeout)
        return []


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop on virtual time; no real I/O or threads (call_soon_threadsafe is moot).

    ``time()`` starts at ``start`` and only moves when every ready callback has
    run: then it jumps to the earliest timer. Timers at equal times run in the
    order the heap yields them, which depends only on the order they were
    scheduled — so a run is deterministic given its inputs.
    """

    def __init__(self, start: float = 0.0) -> None:
        selector = _VirtualSelector()
        self._virtual_now = float(start)
        super().__init__(selector)
        selector.loop = self
        self._clock_resolution = 1e-9

    def time(self) -> float:
        return self._virtual_now

    def advance_to_next_timer(self, timeout: float) -> None:
        """Jump to the earliest scheduled timer (at most ``timeout`` ahead)."""
        # asyncio's private timer heap (BaseEventLoop._scheduled): not in its types
        scheduled = self._scheduled  # type: ignore[attr-defined]
        target = self._virtual_now + timeout
        if scheduled:
            target = min(target, scheduled[0].when())
        self._virtual_now = max(self._virtual_now, target)


class AsyncioClock:
    """`edl.cluster.port.Clock` over an asyncio event loop's clock.

    On a normal loop this is real (monotonic) time — the clock of ``edl run``.
    ``now()`` counts from construction. Without an explicit ``loop`` it binds to
    the running loop at first use, so it may be built before the loop starts.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._epoch = loop.time() if loop is not None else time.monotonic()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def now(self) -> float:
        return self.loop.time() - self._epoch

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def call_soon(self, callback: Callable[..., object], *args: Any) -> asyncio.Handle:
        return self.loop.call_soon(callback, *args)

    def call_later(
        self, delay: float, callback: Callable[..., object], *args: Any
    ) -> asyncio.TimerHandle:
        return self.loop.call_later(max(0.0, delay), callback, *args)

    def call_at(
        self, when: float, callback: Callable[..., object], *args: Any
    ) -> asyncio.TimerHandle:
        return self.loop.call_at(when + self._epoch, callback, *args)


class VirtualClock(AsyncioClock):
    """`Clock` on virtual time: owns a `VirtualEventLoop` that starts at 0.0.

    Drive it from synchronous code::

        clock = VirtualClock()
        cluster = InProcessCluster(clock, ...)
        clock.run(main())          # run a coroutine to completion on virtual time
        clock.run_until(900.0)     # or: let every task run until t = 900 s

    Inside the loop, ``await clock.sleep(5)`` (or ``asyncio.sleep(5)``) takes
    no wall time: the loop jumps to the next timer when nothing is ready.
    """

    def __init__(self, start: float = 0.0) -> None:
        loop = VirtualEventLoop(start)
        super().__init__(loop)
        self._epoch = 0.0

    def run(self, main: Coroutine[Any, Any, T] | Awaitable[T]) -> T:
        """Run ``main`` to completion on virtual time (like `asyncio.run`, loop kept open)."""
        asyncio.set_event_loop(self.loop)
        return self.loop.run_until_complete(main)

    def run_until(self, when: float) -> None:
        """Run every task and timer up to virtual time ``when``; call from outside the loop."""
        if when > self.now():
            self.run(asyncio.sleep(when - self.now()))

    def close(self) -> None:
        """Cancel leftover tasks and close the loop."""
        loop = self.loop
        if loop.is_closed():
            return
        pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()
        asyncio.set_event_loop(None)
