"""etcd through its v3 JSON gateway (HTTP): put, get and a prefix range.

Why not the gRPC `EtcdClient`: the agent forks torch's workers and the local run
forks pods; a process with live gRPC threads forks badly. A few small HTTP calls
per rendezvous round are all a collective job's processes need.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any

TIMEOUT_S = 2.0


def _b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def _call(endpoints: str, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    """POST to the first endpoint that answers; raises OSError when none does."""
    error: OSError | None = None
    for endpoint in [e.strip() for e in endpoints.split(",") if e.strip()]:
        request = urllib.request.Request(
            f"{endpoint.rstrip('/')}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                reply = json.loads(response.read())
            return reply if isinstance(reply, dict) else {}
        except OSError as failure:  # URLError is an OSError
            error = failure
    raise error or OSError(f"no etcd endpoint in {endpoints!r}")


def put(endpoints: str, key: str, value: str, timeout: float = TIMEOUT_S) -> None:
    _call(endpoints, "/v3/kv/put", {"key": _b64(key), "value": _b64(value)}, timeout)


def get(endpoints: str, key: str, timeout: float = TIMEOUT_S) -> str | None:
    reply = _call(endpoints, "/v3/kv/range", {"key": _b64(key)}, timeout)
    kvs = reply.get("kvs") or []
    return base64.b64decode(kvs[0].get("value", "")).decode() if kvs else None


def get_prefix(endpoints: str, prefix: str, timeout: float = TIMEOUT_S) -> dict[str, str]:
    """Every key under ``prefix`` with its value (text)."""
    raw = prefix.encode()
    end = raw[:-1] + bytes([raw[-1] + 1])
    reply = _call(
        endpoints, "/v3/kv/range", {"key": _b64(raw), "range_end": _b64(end)}, timeout
    )
    return {
        base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode()
        for kv in reply.get("kvs") or []
    }
