"""Graceful stop for the runtime servers: SIGTERM (a scale-down or pod deletion) and
SIGINT set one event the server's main loop waits on, so it can checkpoint, resign
and release its lease before exiting instead of dying mid-write."""

from __future__ import annotations

import asyncio
import contextlib
import signal


def stop_on_signals(stop: asyncio.Event | None = None) -> asyncio.Event:
    """Return `stop` (a new event if None), set by SIGTERM and SIGINT on the running loop."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    return stop
