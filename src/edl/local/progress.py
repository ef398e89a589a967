"""Reading the master's progress (pass, tasks, loss, samples/s) from etcd.

The master publishes a JSON document at ``/edl/<namespace>/<job>/state/master/progress``
about once a second (key layout: `edl.runtime.coordination`; a test pins the two
together). The run reads it
for its display and status file; while etcd or the key is not there, the last
value is kept.

Why etcd's HTTP/JSON gateway and not a gRPC client: ``edl run`` forks every
pod, and a process with live gRPC threads forks badly (gRPC's fork handlers
break the child's pollers). Keeping gRPC out of the parent keeps forks clean.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import urllib.error
import urllib.request
from typing import Any

log = logging.getLogger(__name__)
PROGRESS_SUFFIX = "state/master/progress"


def progress_key(namespace: str, job: str) -> str:
    return f"/edl/{namespace}/{job}/{PROGRESS_SUFFIX}"


def etcd_get(endpoint: str, key: str, timeout: float = 2.0) -> bytes | None:
    """One key's value through etcd's v3 JSON gateway (``POST /v3/kv/range``), or None."""
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    request = urllib.request.Request(
        f"{endpoint.rstrip('/')}/v3/kv/range",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        reply = json.loads(response.read())
    kvs = reply.get("kvs") or []
    if not kvs:
        return None
    return base64.b64decode(kvs[0].get("value", ""))


class ProgressReader:
    """Returns the latest progress dict of one job (or None before the first)."""

    def __init__(self, etcd_endpoints: str, namespace: str, job: str) -> None:
        self.endpoint = etcd_endpoints.split(",")[0].strip()
        self.key = progress_key(namespace, job)
        self.latest: dict[str, Any] | None = None

    async def read(self, timeout: float = 2.0) -> dict[str, Any] | None:
        """The progress now, or the last one seen if etcd does not answer in time."""
        try:
            raw = await asyncio.to_thread(etcd_get, self.endpoint, self.key, timeout)
        except (OSError, urllib.error.URLError, ValueError) as error:
            log.debug("progress not read: %s", error)
            return self.latest
        if raw:
            try:
                value = json.loads(raw)
            except ValueError:
                return self.latest
            if isinstance(value, dict):
                self.latest = value
        return self.latest

    async def close(self) -> None:
        """Nothing to release (one HTTP request per read); kept for symmetry."""
