"""List + watch one Kubernetes resource into memory (a client-go style reflector).

Why: the Autoscaler asks for cluster resources every tick. Listing 150,000 pods
each tick would load the API server and take seconds; instead we list once,
then follow the watch stream and keep the state in memory.

Protocol followed:
- list, remember the list's resourceVersion, hand every object to `store.replace`;
- watch from that resourceVersion, hand every event to `store.apply`;
- the stream breaks (network, 5xx): back off and watch again from the last
  resourceVersion seen, so no event is lost and none is re-listed;
- 410 Gone (our resourceVersion is older than the server's history): list again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from lightkube import AsyncClient

from edl.kube.retry import http_status

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
    ) -> None:
        self.client = client
        self.resource = resource
        self.store = store
        self.namespace = namespace
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.server_timeout = server_timeout
        self.chunk_size = chunk_size
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

    async def list_once(self) -> None:
        """Replace the store with a fresh list and remember its resourceVersion."""
        listing = self.client.list(self.resource, chunk_size=self.chunk_size, **self._scope())
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
        self.synced.set()
        log.debug("listed %d %s at resourceVersion %s", count, self.kind, version)

    async def watch_once(self) -> None:
        """Follow the watch stream until it raises."""
        stream = self.client.watch(
            self.resource,
            resource_version=self.resource_version,
            server_timeout=self.server_timeout,
            **self._scope(),
        )
        async for event_type, obj in stream:
            raw = obj.to_dict()
            self.store.apply(event_type, raw)
            self.events += 1
            version = (raw.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = version

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
            except Exception as exc:
                status = http_status(exc) or _status_code(exc)
                self.watch_restarts += 1
                if status == 410:
                    log.info("%s watch expired (410 Gone); listing again", self.kind)
                    need_list = True
                    continue
                log.warning("%s list/watch failed (%s: %s); retrying in %.1fs",
                            self.kind, type(exc).__name__, status or exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(self.max_backoff, backoff * 2)


def _status_code(exc: BaseException) -> int | None:
    """The code of a watch stream ERROR event (lightkube raises ApiError without a response)."""
    status = getattr(exc, "status", None)
    return getattr(status, "code", None)
