"""Polling for tests that wait on asynchronous effects (controllers, watches, processes).

Deadlines are generous because the suite runs on a shared, loaded 2-core machine: a
deadline only costs time when a test is already failing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

NOT_YET = (KeyError, TypeError, IndexError)  # the object being polled is not complete yet


async def eventually(
    check: Callable[[], Any], timeout: float = 60.0, interval: float = 0.1
) -> Any:
    """Return check()'s first truthy result; AssertionError when `timeout` seconds pass."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            result = check()
        except NOT_YET:
            result = None
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"condition not reached within {timeout} s")
        await asyncio.sleep(interval)
