"""List + watch one Kubernetes resource into memory (a client-go style reflector).

Why: the Autoscaler asks for cluster resources every tick. Listing 150,000 pods
each tick would load the API server and take seconds; instead we list once,
then follow the watch stream and keep the state in memory.

Protocol followed:
- list, remember the list's resourceVersion, hand every object to `store.replace`;
- watch from that resourceVersion, hand every event to `store.apply`;
- the stream breaks (network, 5xx): back off and watch again from the last
  resourceVersion seen, so no event is lost and none is re-listed;
- 410 Gone (our resourceVersion is older than the server's history): list again;
- watches ask for bookmarks (``allowWatchBookmarks``): the server's periodic
  BOOKMARK events move our resourceVersion on a quiet resource (fewer 410s) and show
  the stream is alive; they are not handed to the store;
- a stream silent for ``idle_timeout`` (longer than the server's own
  ``timeoutSeconds``, after which a healthy server closes it) is a half-open
  connection: drop it and list again, so the cache never freezes silently;
- ``stale_for(now)``: how long the cache has gone without a successful list or a
  word from the server while failing — /readyz and the metrics show it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, Callable, Hashable
from typing import Any, Protocol

from lightkube import AsyncClient

from edl.kube.retry import http_status
from edl.kube.watch_stream import raw_watch

log = logging.getLogger(__name__)


class Store(Protocol):
    """Where a reflector puts what it sees; every call must be cheap and synchronous.

    A relist is `begin_replace()`, then `apply("ADDED", obj)` per listed object,
    then `end_replace()` (which forgets whatever was not listed), so a list of
    150,000 pods is never held in memory at once.
    """

    def begin_replace(self) -> None: ...

    def apply(self, event_type: str, obj: dict[str, Any]) -> None: ...

    def end_replace(self) -> None: ...


class FingerprintStore:
    """A `Store` that keeps one fingerprint per key and calls `changed(key, obj)` when an
    object's fingerprint changes, when it appears, and when it goes (deleted, or missing
    from a relist; `obj` None). Subclasses say what a key is (`key`: None skips the
    object) and what counts as a change (`fingerprint`)."""

    def __init__(self) -> None:
        self._prints: dict[tuple[str, str], Hashable] = {}
        self._listed: set[tuple[str, str]] | None = None

    def key(self, obj: dict[str, Any]) -> tuple[str, str] | None:
        raise NotImplementedError

    def fingerprint(self, obj: dict[str, Any]) -> Hashable:
        raise NotImplementedError

    def changed(self, key: tuple[str, str], obj: dict[str, Any] | None) -> None:
        raise NotImplementedError

    def begin_replace(self) -> None:
        self._listed = set()

    def end_replace(self) -> None:
        if self._listed is not None:
            for key in set(self._prints) - self._listed:
                del self._prints[key]
                self.changed(key, None)
        self._listed = None

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        key = self.key(obj)
        if key is None:
            return
        if self._listed is not None:
            self._listed.add(key)
        if event_type == "DELETED":
            if key in self._prints:
                del self._prints[key]
                self.changed(key, None)
            return
        fingerprint = self.fingerprint(obj)
        if key not in self._prints or self._prints[key] != fingerprint:
            self._prints[key] = fingerprint
            self.changed(key, obj)


class Reflector:
    """Keeps `store` equal to the server's set of `resource` objects."""

    def __init__(
        self,
        client: AsyncClient,
        resource: type,
        store: Store,
        *,
        namespace: str | None = "*",
        min_backoff: float = 0.1,
        max_backoff: float = 5.0,
        server_timeout: int = 290,
        chunk_size: int = 500,
        idle_timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        self.labels = dict(labels or {})  # a label selector (equality only); {}: every object
        self.resource = resource
        self.store = store
        self.namespace = namespace
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.server_timeout = server_timeout
        self.chunk_size = chunk_size
        self.idle_timeout = idle_timeout if idle_timeout is not None else server_timeout + 30.0
        self.clock = clock
        self.failing_since: float | None = None  # first failure since the last sign of life
        self.idle_relists = 0
        self.synced = asyncio.Event()
        self.resource_version: str | None = None
        self.lists = 0
        self.watch_restarts = 0
        self.events = 0

    @property
    def kind(self) -> str:
        return self.resource.__name__

    def _scope(self) -> dict[str, Any]:
        # Cluster-scoped kinds (Node) take no namespace argument.
        return {} if self.namespace is None else {"namespace": self.namespace}

    def _selected(self) -> dict[str, Any]:
        return {"labels": self.labels} if self.labels else {}

    async def list_once(self) -> None:
        """Replace the store with a fresh list and remember its resourceVersion."""
        listing: Any = self.client.list(self.resource, chunk_size=self.chunk_size,
                                        **self._scope(), **self._selected())
        count = 0
        self.store.begin_replace()
        async for obj in listing:  # page by page; each object is folded in and dropped
            self.store.apply("ADDED", obj.to_dict())
            count += 1
        self.store.end_replace()
        try:
            version: str | None = listing.resourceVersion
        except Exception:  # empty list: lightkube has no version to report
            version = None
        self.resource_version = version
        self.lists += 1
        self.failing_since = None
        self.synced.set()
        log.debug("listed %d %s at resourceVersion %s", count, self.kind, version)

    def stale_for(self, now: float | None = None) -> float:
        """Seconds the cache has been failing to follow the server (0: following it)."""
        if self.failing_since is None:
            return 0.0
        return max((self.clock() if now is None else now) - self.failing_since, 0.0)

    def _open_watch(self) -> AsyncIterable[tuple[str, Any]]:
        """The watch stream, with bookmarks requested, as plain dicts.

        lightkube's ``watch()`` has no bookmark parameter and decodes every event,
        bookmarks too, into its strict model: a Pod BOOKMARK (an empty Pod whose
        ``spec.containers`` is null) failed validation and broke the stream each
        time the server sent one. So the request is built with lightkube's request
        builder and its lines are read here (`raw_watch`); objects stay dicts, which
        also spares a model round trip per event.
        """
        inner = getattr(self.client, "_client", None)
        if inner is None or not hasattr(inner, "prepare_request"):
            return self.client.watch(self.resource, resource_version=self.resource_version,
                                     server_timeout=self.server_timeout, **self._scope(),
                                     **self._selected())
        params = {"timeoutSeconds": self.server_timeout,
                  "resourceVersion": self.resource_version, "allowWatchBookmarks": "true"}
        if self.labels:
            params["labelSelector"] = ",".join(f"{k}={v}" for k, v in self.labels.items())
        request = inner.prepare_request("list", res=self.resource, watch=True, params=params,
                                        **self._scope())
        return raw_watch(inner, request)

    async def watch_once(self) -> None:
        """Follow the watch stream until it raises (`WatchIdle` after ``idle_timeout``).

        The deadline moves with every line received; the stream is read in this task
        (no inner task), so cancelling the reflector unwinds it as before.
        """
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.idle_timeout) as deadline:
                async for event_type, obj in self._open_watch():
                    deadline.reschedule(loop.time() + self.idle_timeout)
                    self._received(event_type, obj)
        except TimeoutError:
            raise WatchIdle(f"{self.kind} watch silent for {self.idle_timeout:.0f} s") from None

    def _received(self, event_type: str, obj: Any) -> None:
        self.failing_since = None  # the server talks to us
        raw = obj if isinstance(obj, dict) else obj.to_dict()
        version = (raw.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
        if event_type == "BOOKMARK":
            return
        self.store.apply(event_type, raw)
        self.events += 1

    async def run(self) -> None:
        """List, then watch forever; never returns except by cancellation."""
        backoff = self.min_backoff
        need_list = True
        while True:
            try:
                if need_list:
                    await self.list_once()
                    need_list = False
                await self.watch_once()
                backoff = self.min_backoff
            except asyncio.CancelledError:
                raise
            except WatchIdle as idle:
                self.watch_restarts += 1
                self.idle_relists += 1
                if self.failing_since is None:
                    self.failing_since = self.clock()
                log.warning("%s; listing again", idle)
                need_list = True
                continue
            except Exception as exc:
                status = http_status(exc) or _status_code(exc)
                self.watch_restarts += 1
                if self.failing_since is None:
                    self.failing_since = self.clock()
                if status == 410:
                    log.info("%s watch expired (410 Gone); listing again", self.kind)
                    need_list = True
                    continue
                log.warning("%s list/watch failed (%s: %s); retrying in %.1fs",
                            self.kind, type(exc).__name__, status or exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(self.max_backoff, backoff * 2)


class WatchIdle(Exception):
    """No event, bookmark or close from the server for ``idle_timeout``: a half-open
    connection (the server would have closed the watch at its ``timeoutSeconds``)."""


def _status_code(exc: BaseException) -> int | None:
    """The code of a watch stream ERROR event (lightkube raises ApiError without a response)."""
    status = getattr(exc, "status", None)
    return getattr(status, "code", None)
