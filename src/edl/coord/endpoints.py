"""Parse ``EDL_ETCD_ENDPOINTS``: comma-separated ``http://host:port`` (or ``host:port``)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from edl.coord.errors import EndpointError

DEFAULT_PORT = 2379


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @property
    def target(self) -> str:
        """The gRPC target (``host:port``; IPv6 literals in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.target}"


def _parse_one(item: str) -> Endpoint:
    text = item if "://" in item else f"http://{item}"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as error:
        raise EndpointError(f"etcd endpoint {item!r}: {error}") from None
    if parts.scheme != "http":
        raise EndpointError(
            f"etcd endpoint {item!r}: scheme {parts.scheme!r} not supported (use http://)"
        )
    if not parts.hostname:
        raise EndpointError(f"etcd endpoint {item!r}: no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise EndpointError(f"etcd endpoint {item!r}: must be http://host:port without a path")
    if port == 0:
        raise EndpointError(f"etcd endpoint {item!r}: port must be 1-65535")
    return Endpoint(parts.hostname, port or DEFAULT_PORT)


def parse_endpoints(text: str) -> list[Endpoint]:
    """Parse comma-separated endpoints; raise EndpointError naming every bad item."""
    if not isinstance(text, str) or not text.strip():
        raise EndpointError(
            f"etcd endpoints must be a non-empty comma-separated string, got {text!r}"
        )
    items = [item.strip() for item in text.split(",")]
    problems: list[str] = []
    endpoints: list[Endpoint] = []
    for position, item in enumerate(items):
        if not item:
            problems.append(f"item {position} is empty")
            continue
        try:
            endpoints.append(_parse_one(item))
        except EndpointError as error:
            problems.append(str(error))
    if problems:
        raise EndpointError("bad etcd endpoints: " + "; ".join(problems))
    return endpoints
