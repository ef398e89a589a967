"""Watches that cannot freeze the caches silently: bookmarks requested, an idle stream
dropped and listed again, and a cache that fails to follow shown in /readyz."""

from __future__ import annotations

import asyncio
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from edl.kube.metrics import HealthState
from edl.kube.reflector import Reflector
from polling import eventually


class Names:
    """A reflector store that keeps node names."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self._listed: set[str] | None = None

    def begin_replace(self) -> None:
        self._listed = set()

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if self._listed is not None:
            self._listed.add(name)
        if event_type == "DELETED":
            self.names.discard(name)
        else:
            self.names.add(name)

    def end_replace(self) -> None:
        assert self._listed is not None
        self.names &= self._listed
        self._listed = None


async def test_watches_ask_for_bookmarks(api: AsyncClient, emulator: Any) -> None:
    queries: list[str] = []

    def record(request: Any) -> bool:  # never matches: records watch queries
        if request.method == "GET" and "watch" in str(request.url):
            queries.append(str(request.url))
        return False

    emulator.fail_next(record, 500, times=10**9)
    reflector = Reflector(api, Node, Names(), namespace=None)
    task = asyncio.create_task(reflector.run())
    try:
        await eventually(lambda: queries)
        assert "allowWatchBookmarks=true" in queries[0]
    finally:
        task.cancel()


async def test_a_pod_bookmark_moves_the_version_without_breaking_the_watch(
    api: AsyncClient, emulator: Any,
) -> None:
    """The API server's Pod BOOKMARK is an empty Pod (`spec.containers: null`), which
    lightkube's Pod model rejects; the stream must take its resourceVersion and go on
    (it broke and re-opened after each bookmark, seen on the real control plane)."""
    store = Names()
    reflector = Reflector(api, Pod, store)  # every namespace, as the controller watches
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(reflector.synced.wait(), 10)

        async def bookmarked() -> bool:  # sent again until the watch is open to take one
            version = await emulator.send_bookmark("v1/pods", "Pod", {"containers": None})
            await asyncio.sleep(0.1)
            return reflector.resource_version == version
        await eventually(bookmarked)
        await api.create(Pod.from_dict({"metadata": {"name": "p", "namespace": "default"},
                                        "spec": {"containers": [{"name": "c", "image": "i"}]}}))
        await eventually(lambda: store.names == {"p"})
        assert reflector.events == 1 and reflector.lists == 1
        assert reflector.watch_restarts == 0  # one stream throughout
    finally:
        task.cancel()


async def test_a_silent_stream_is_dropped_and_the_resource_listed_again(
    api: AsyncClient,
) -> None:
    await api.create(Node.from_dict({"metadata": {"name": "a"}}))
    store = Names()
    reflector = Reflector(api, Node, store, namespace=None, idle_timeout=0.5)
    hung = asyncio.Event()

    async def half_open() -> Any:  # a connection that never says anything again
        await hung.wait()
        yield  # pragma: no cover

    reflector._open_watch = half_open  # type: ignore[method-assign]
    task = asyncio.create_task(reflector.run())
    try:
        await eventually(lambda: store.names == {"a"})
        await api.create(Node.from_dict({"metadata": {"name": "b"}}))  # missed by the watch
        await eventually(lambda: store.names == {"a", "b"})  # ... found by the relist
        assert reflector.idle_relists >= 1 and reflector.lists >= 2
    finally:
        task.cancel()


def test_readiness_reports_a_stale_cache() -> None:
    now = [0.0]
    health = HealthState(clock=lambda: now[0])
    health.leader = health.synced = True
    health.stale_caches = {"Pod": 5.0, "Node": 0.0}
    assert health.ready()[0]
    health.stale_caches["Pod"] = 61.0
    ok, text = health.ready()
    assert not ok and "Pod 61s" in text


async def test_stale_for_counts_from_the_first_failure(api: AsyncClient, emulator: Any) -> None:
    now = [100.0]
    reflector = Reflector(api, Node, Names(), namespace=None, clock=lambda: now[0],
                          min_backoff=0.05, max_backoff=0.05)
    emulator.fail_next(lambda r: r.method == "GET", 503, times=10**9)
    task = asyncio.create_task(reflector.run())
    try:
        await eventually(lambda: reflector.watch_restarts >= 2)
        now[0] = 170.0
        assert reflector.stale_for() == 70.0
    finally:
        task.cancel()
