"""One Kubernetes watch request, read line by line into ``(type, dict)`` events.

Why not lightkube's ``watch()``: it decodes every event into the resource's model,
bookmarks included, and the API server's BOOKMARK object is an empty object of the
kind (a Pod with ``spec.containers: null``), which the model rejects. Here a BOOKMARK
carries only its ``metadata``, an ERROR raises lightkube's `ApiError` (a 410 Gone
among them, as lightkube's own stream does), and every other object stays the plain
dict the reflector's store wants. The stream ends when the server closes it (its
``timeoutSeconds``); the caller watches again from the last resourceVersion.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from lightkube.core import decoders
from lightkube.core.exceptions import ApiError
from lightkube.core.generic_client import WatchDriver

__all__ = ["decode_line", "raw_watch"]


def decode_line(line: str | bytes) -> tuple[str, dict[str, Any]] | None:
    """One watch-stream line -> ``(type, object)``; None for a blank line.

    A BOOKMARK's object is reduced to its metadata (the rest is the kind's empty
    value, meaningless and possibly invalid); an ERROR raises `ApiError`.
    """
    if not line or not line.strip():
        return None
    event = decoders.decode_watch_event(line.encode() if isinstance(line, str) else line)
    if event.type == "ERROR":
        raise ApiError(status=decoders.decode_status(event.object))
    obj: dict[str, Any] = decoders.decode_object(event.object, dict)
    if event.type == "BOOKMARK":
        return "BOOKMARK", {"metadata": obj.get("metadata") or {}}
    return event.type, obj


async def raw_watch(inner: Any, request: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The events of one watch request (`request`: lightkube's prepared BasicRequest,
    sent with `inner`, lightkube's async generic client), until the server closes it."""
    driver = WatchDriver(request, inner._client.build_request)
    response = await inner.send(driver.get_request(timeout=inner._watch_timeout), stream=True)
    try:
        response.raise_for_status()
        async for line in response.aiter_lines():
            event = decode_line(line)
            if event is not None:
                yield event
    finally:
        await response.aclose()
