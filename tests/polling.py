"""Polling for tests that wait on asynchronous effects (controllers, watches, processes).

Deadlines are generous because the suite runs on a shared, loaded 2-core machine: a
deadline only costs time when a test is already failing.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")
NOT_YET = (KeyError, TypeError, IndexError)  # the object being polled is not complete yet


async def eventually(
    check: Callable[[], Any],
    timeout: float = 60.0,
    what: str = "condition",
    *,
    interval: float = 0.1,
    not_yet: tuple[type[BaseException], ...] = NOT_YET,
) -> Any:
    """Return check()'s first truthy result (awaited if it is a coroutine); AssertionError
    naming ``what`` when ``timeout`` seconds pass. Errors in ``not_yet`` count as false."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
        except not_yet:
            result = None
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        await asyncio.sleep(interval)


def run_retrying(
    read: Callable[[], Awaitable[T]],
    retry_on: tuple[type[BaseException], ...],
    attempts: int = 10,
    pause: float = 0.5,
) -> T:
    """asyncio.run(read()), retried on `retry_on`: on a loaded machine one etcd connection
    can be slow to come up, and a test reading state should not fail for that."""
    for _ in range(attempts - 1):
        try:
            return asyncio.run(read())
        except retry_on:
            time.sleep(pause)
    return asyncio.run(read())


def wait_until(check: Callable[[], T], timeout: float, label: str, interval: float = 0.2) -> T:
    """check()'s first truthy result, polled from synchronous tests (processes, files)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {label}")
