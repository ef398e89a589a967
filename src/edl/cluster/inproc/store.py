"""The object store of the in-process control plane: manifests with optimistic concurrency.

It behaves like the Kubernetes API server for the parts edl relies on:
``metadata.resourceVersion`` changes on every write and a replace carrying a
stale one is refused (`ConflictError`); ``metadata.generation`` changes only
when ``spec`` changes (status writes do not bump it, so a controller can tell
its own status updates from a user's edit); callers always get their own copy.

Pods are not kept here: they live in the plane's indexes, which the scheduler
and the sampling hooks read in O(1) (see `plane`).
"""

from __future__ import annotations

import itertools
import marshal
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from edl.api.names import object_key
from edl.cluster.port import AlreadyExistsError, ConflictError, Manifest, NotFoundError

Key = tuple[str, str]  # (namespace, name)
EventKind = str  # "ADDED" | "MODIFIED" | "DELETED"
Listener = Callable[[EventKind, Manifest, Manifest | None], None]
"""Called synchronously with (event, stored object, previous object or None). Do not mutate."""


def freeze(obj: Any) -> bytes | None:
    """A compact serialised snapshot that `thaw` turns into a fresh deep copy.

    `marshal` (in-process only: never written out or read from elsewhere) thaws
    2-3x faster than a Python-level copy, and objects are read far more often
    than written. None when ``obj`` holds types marshal does not know.
    """
    try:
        return marshal.dumps(obj)
    except ValueError:
        return None


def thaw(blob: bytes) -> Any:
    return marshal.loads(blob)


def copy_manifest(obj: Any) -> Any:
    """Deep copy of JSON-like data (dicts, lists, scalars); 3x faster than `copy.deepcopy`."""
    kind = type(obj)
    if kind is dict:
        return {key: copy_manifest(value) for key, value in obj.items()}
    if kind is list:
        return [copy_manifest(value) for value in obj]
    return obj


class ObjectStore:
    """Objects of several kinds, keyed by (namespace, name), with watchers per kind.

    ``now`` supplies creation timestamps (virtual or real seconds).
    """

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._objects: dict[str, dict[Key, Manifest]] = {}
        self._frozen: dict[tuple[str, Key], bytes | None] = {}  # copies to hand out
        self._listeners: dict[str, list[Listener]] = {}
        self._versions = itertools.count(1)
        self._uids = itertools.count(1)

    # -- reads -----------------------------------------------------------------------
    def peek(self, kind: str, namespace: str, name: str) -> Manifest | None:
        """The stored object itself (no copy) or None; for the plane's own read-only use."""
        return self._objects.get(kind, {}).get((namespace, name))

    def get(self, kind: str, namespace: str, name: str) -> Manifest:
        """A copy of the stored object; `NotFoundError` if absent."""
        obj = self.peek(kind, namespace, name)
        if obj is None:
            raise NotFoundError(kind, namespace, name)
        return self._copy(kind, (namespace, name), obj)

    def _copy(self, kind: str, key: Key, obj: Manifest) -> Manifest:
        blob = self._frozen.get((kind, key))
        return thaw(blob) if blob is not None else copy_manifest(obj)

    def _put(self, kind: str, key: Key, obj: Manifest) -> Manifest:
        """Store ``obj`` (never mutated afterwards) and return a copy for the caller."""
        self._objects.setdefault(kind, {})[key] = obj
        blob = self._frozen[(kind, key)] = freeze(obj)
        return thaw(blob) if blob is not None else copy_manifest(obj)

    def items(self, kind: str) -> Iterator[Manifest]:
        """Stored objects of a kind (no copies), in creation order."""
        return iter(list(self._objects.get(kind, {}).values()))

    # -- writes ----------------------------------------------------------------------
    def create(self, kind: str, obj: Mapping[str, Any]) -> Manifest:
        """Store a copy of ``obj`` with uid, resourceVersion, generation 1 and a timestamp."""
        namespace, name = object_key(obj)
        if not name:
            raise NotFoundError(kind, namespace, "", "metadata.name is required")
        table = self._objects.setdefault(kind, {})
        if (namespace, name) in table:
            raise AlreadyExistsError(kind, namespace, name, "already exists")
        stored = copy_manifest(dict(obj))
        stored.setdefault("kind", kind)
        metadata = stored.setdefault("metadata", {})
        metadata["namespace"] = namespace
        metadata["uid"] = f"{kind.lower()}-{next(self._uids)}"
        metadata["resourceVersion"] = str(next(self._versions))
        metadata["generation"] = 1
        metadata["creationTimestamp"] = self._now()
        metadata.pop("deletionTimestamp", None)
        copy = self._put(kind, (namespace, name), stored)
        self._emit(kind, "ADDED", stored, None)
        return copy

    def replace(self, kind: str, obj: Mapping[str, Any]) -> Manifest:
        """Replace spec/metadata of a stored object if ``obj``'s resourceVersion is current.

        ``status`` in ``obj`` is ignored (it has its own subresource), as are
        the identity fields (uid, creationTimestamp).
        """
        namespace, name = object_key(obj)
        current = self.peek(kind, namespace, name)
        if current is None:
            raise NotFoundError(kind, namespace, name)
        metadata = obj.get("metadata") or {}
        given = metadata.get("resourceVersion")
        if given is not None and str(given) != current["metadata"]["resourceVersion"]:
            raise ConflictError(
                kind,
                namespace,
                name,
                f"the object has been modified (resourceVersion {given} is stale, "
                f"current is {current['metadata']['resourceVersion']}); re-read and retry",
            )
        stored = copy_manifest(dict(obj))
        new_metadata = stored.setdefault("metadata", {})
        for field in ("namespace", "uid", "creationTimestamp", "generation"):
            new_metadata[field] = current["metadata"][field]
        if stored.get("spec") != current.get("spec"):
            new_metadata["generation"] = current["metadata"]["generation"] + 1
        if "status" in current:
            stored["status"] = current["status"]
        else:
            stored.pop("status", None)
        new_metadata["resourceVersion"] = str(next(self._versions))
        copy = self._put(kind, (namespace, name), stored)
        self._emit(kind, "MODIFIED", stored, current)
        return copy

    def update_status(
        self, kind: str, namespace: str, name: str, status: Mapping[str, Any],
        resource_version: str | None = None,
    ) -> Manifest:
        """Replace ``status`` (generation kept, resourceVersion bumped); with
        ``resource_version``, only over that version (`ConflictError`)."""
        current = self.peek(kind, namespace, name)
        if current is None:
            raise NotFoundError(kind, namespace, name)
        if resource_version is not None and \
                current["metadata"].get("resourceVersion") != resource_version:
            raise ConflictError(kind, namespace, name, "the object has been modified; "
                                "please apply your changes to the latest version and try again")
        stored = dict(current)
        stored["metadata"] = dict(current["metadata"])
        stored["status"] = copy_manifest(dict(status))
        stored["metadata"]["resourceVersion"] = str(next(self._versions))
        copy = self._put(kind, (namespace, name), stored)
        self._emit(kind, "MODIFIED", stored, current)
        return copy

    def delete(self, kind: str, namespace: str, name: str) -> Manifest:
        """Remove an object; returns it (with deletionTimestamp). `NotFoundError` if absent."""
        table = self._objects.get(kind, {})
        current = table.pop((namespace, name), None)
        if current is None:
            raise NotFoundError(kind, namespace, name)
        self._frozen.pop((kind, (namespace, name)), None)
        gone = dict(current)
        gone["metadata"] = dict(current["metadata"], deletionTimestamp=self._now())
        self._emit(kind, "DELETED", gone, current)
        return gone

    # -- watching --------------------------------------------------------------------
    def listen(self, kind: str, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` synchronously on every change of ``kind``; returns unsubscribe."""
        listeners = self._listeners.setdefault(kind, [])
        listeners.append(listener)

        def unsubscribe() -> None:
            if listener in listeners:
                listeners.remove(listener)

        return unsubscribe

    def _emit(self, kind: str, event: EventKind, obj: Manifest, old: Manifest | None) -> None:
        for listener in list(self._listeners.get(kind, ())):
            listener(event, obj, old)
