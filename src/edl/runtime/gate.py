"""A gRPC servicer that forwards to the current term's service, or refuses.

The listening socket outlives leadership terms (its address is what we
publish), but the service behind it changes: between terms — before winning
an election, after losing a lease — every call is refused with UNAVAILABLE,
which clients treat as "look the address up again".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from edl.runtime.proto import runtime_pb2 as pb
from edl.runtime.proto import runtime_pb2_grpc as pb_grpc


def rpc_names(service: str) -> list[str]:
    """Every RPC of `service` ("Master", "PServer") as runtime.proto declares it."""
    return [method.name for method in pb.DESCRIPTOR.services_by_name[service].methods]


def make_gate(service: str, sync: bool = False) -> Any:
    """A servicer for `service` whose every RPC forwards to `.current` when it is set.

    The RPCs come from the proto, not from a list: one added there can never fall
    through to the generated base class's UNIMPLEMENTED."""
    what = service.lower()

    def forward_sync(name: str) -> Callable[..., Any]:
        def handler(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            current = self.current
            if current is None or not current.serving:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"{what} not serving")
            return getattr(current, name)(request, context)

        handler.__name__ = name
        return handler

    def forward(name: str) -> Callable[..., Any]:
        async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
            current = self.current
            if current is None or not current.serving:
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"{what} not serving")
            return await getattr(current, name)(request, context)

        handler.__name__ = name
        return handler

    make = forward_sync if sync else forward
    base = getattr(pb_grpc, f"{service}Servicer")
    cls = type(f"{service}Gate", (base,), {m: make(m) for m in rpc_names(service)})
    gate = cls()
    gate.current = None
    return gate


SERVER_OPTIONS = [
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.so_reuseport", 0),
]
