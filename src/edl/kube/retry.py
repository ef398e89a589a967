"""Retrying Kubernetes API calls on conflicts and server errors.

The API server answers 409 when an optimistic update loses a race and 5xx (or
429) when it is overloaded or restarting; both are transient, so the caller
retries with backoff instead of failing a reconcile. Everything else (400, 403,
404, 422) is a real answer and is raised at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx2

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRIABLE_SERVER = frozenset({429, 500, 502, 503, 504})


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a failed API call, or None for network-level failures.

    lightkube raises `ApiError` when the body is a JSON Status and a plain
    `HTTPStatusError` otherwise; both carry the response.
    """
    if isinstance(exc, httpx2.HTTPStatusError) and exc.response is not None:
        return exc.response.status_code
    return None


def is_conflict(exc: BaseException) -> bool:
    return http_status(exc) == 409


def is_not_found(exc: BaseException) -> bool:
    return http_status(exc) == 404


def is_transient(exc: BaseException) -> bool:
    """Server overload/restart or a dropped connection: worth trying again."""
    status = http_status(exc)
    if status is None:
        return isinstance(exc, httpx2.TransportError | ConnectionError | asyncio.TimeoutError)
    return status in RETRIABLE_SERVER


def describe_failure(exc: BaseException, server: str) -> str:
    """One line saying why an API call failed, naming the API server when it was not reached.

    lightkube's own texts ("All connection attempts failed") say neither where nor what.
    """
    status = http_status(exc)
    if status is None and is_transient(exc):
        detail = " ".join(str(exc).split()) or type(exc).__name__
        return f"cannot reach the API server at {server}: {detail}"
    if status is not None:
        message = getattr(getattr(exc, "status", None), "message", None) or str(exc)
        return f"{status}: {' '.join(str(message).split())}"
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


async def retry_call(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    attempts: int = 6,
    base_delay: float = 0.05,
    max_delay: float = 2.0,
    retry_conflicts: bool = True,
) -> T:
    """Run `call` until it succeeds, retrying transient errors (and 409 if asked).

    `call` must re-read whatever it depends on, so a retry after a conflict
    works on fresh state rather than repeating the stale write.
    """
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except Exception as exc:
            retriable = is_transient(exc) or (retry_conflicts and is_conflict(exc))
            if not retriable or attempt == attempts:
                raise
            delay = min(max_delay, base_delay * 2 ** (attempt - 1)) * (0.5 + random.random())
            log.info("%s failed (%s, attempt %d/%d); retrying in %.2fs",
                     what, http_status(exc) or type(exc).__name__, attempt, attempts, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
