"""Record a real cluster as a log of watch events, each stamped when it arrived.

Why not sample: a sampler that lists every pod each second must itself keep to its grid,
and on a loaded machine it fell 2-3 s behind (docs/testing.md). A watch costs the API
server and this process one small message per change; the timeline is rebuilt afterwards
on any grid (tests/e2e/fidelity_replay.py), so nothing has to happen on time here. The
receive time of an event is its time in the log; `lag_s` measures how far that trailed
the API server's own clock (creationTimestamps of pods, whole seconds).

One thread per kind: an initial list (its items logged as ADDED), then watches from the
list's resourceVersion, re-opened every `WATCH_S` seconds from the last version seen (so
stopping takes at most that long and no event is lost); a 410 Gone relists (logged as a
RESYNC of the whole kind).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from e2e.control_plane import ControlPlane
from e2e.rest import Rest

WATCH_S = 5  # a watch is re-opened this often (also the longest stop takes)
KINDS = ("Pod", "Job", "TrainingJob", "Deployment")


@dataclass(frozen=True)
class Event:
    """One change of one object: `at` seconds on the monotonic clock when it arrived."""

    at: float
    kind: str
    type: str  # ADDED, MODIFIED, DELETED, or RESYNC (`obj` is then a list's items)
    obj: Any


def timestamp(text: str) -> float:
    """An API timestamp (RFC 3339, whole seconds) as seconds since the epoch."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class WatchRecorder:
    """Start with `start()` before the run, `stop()` after it; then `events()`."""

    plane: ControlPlane
    kinds: tuple[str, ...] = KINDS
    # receive time minus creationTimestamp of pods, the largest: the watch's lag plus up to
    # 1 s (the timestamp has whole seconds), so never less than the true lag
    lag_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    _logs: dict[str, list[Event]] = field(default_factory=dict)
    _threads: list[threading.Thread] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        ready = []
        for kind in self.kinds:
            self._logs[kind] = []
            listed = threading.Event()
            thread = threading.Thread(target=self._follow, args=(kind, listed), daemon=True,
                                      name=f"watch-{kind}")
            thread.start()
            self._threads.append(thread)
            ready.append(listed)
        for listed in ready:  # every kind listed: nothing before start() is missing
            if not listed.wait(60):
                raise RuntimeError(f"watch recorder: no initial list within 60 s {self.errors}")

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(WATCH_S + 30)

    def events(self) -> list[Event]:
        """Every kind's events merged in arrival order (stable within a kind)."""
        merged = [event for log in self._logs.values() for event in log]
        return sorted(merged, key=lambda event: event.at)

    # -- one kind ------------------------------------------------------------------------
    def _follow(self, kind: str, listed: threading.Event) -> None:
        path = Rest.path(kind)
        version = ""
        while not self._stop.is_set():
            try:
                if not version:  # first, or after an error: list (logged as a RESYNC)
                    version = self._list(kind, path)
                    listed.set()
                version = self._watch(kind, path, version)
            except (urllib.error.URLError, OSError, ValueError, KeyError) as error:
                if self._stop.is_set():
                    return
                self.errors.append(f"{kind}: {error}")
                version = ""
                time.sleep(0.2)

    def _list(self, kind: str, path: str) -> str:
        answer = self.plane.request("GET", path)
        now = time.monotonic()
        log = self._logs[kind]
        items = answer["items"]
        if not log:
            log.extend(Event(now, kind, "ADDED", item) for item in items)
        else:
            log.append(Event(now, kind, "RESYNC", items))
        return str(answer["metadata"]["resourceVersion"])

    def _watch(self, kind: str, path: str, version: str) -> str:
        url = (f"{self.plane.url}{path}?watch=1&resourceVersion={version}"
               f"&timeoutSeconds={WATCH_S}&allowWatchBookmarks=true")
        request = urllib.request.Request(url)
        log = self._logs[kind]
        with urllib.request.urlopen(request, context=self.plane.ssl_context(),
                                    timeout=WATCH_S + 30) as stream:
            for line in stream:
                now = time.monotonic()
                event = json.loads(line)
                kind_of, obj = event["type"], event["object"]
                if kind_of == "ERROR":
                    raise ValueError(f"watch error: {obj.get('message')}")
                version = obj["metadata"]["resourceVersion"]
                if kind_of == "BOOKMARK":
                    continue
                log.append(Event(now, kind, kind_of, obj))
                if kind == "Pod" and kind_of == "ADDED":
                    created = timestamp(obj["metadata"]["creationTimestamp"])
                    self.lag_s = max(self.lag_s, time.time() - created)
        return version
