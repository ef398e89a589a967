"""Synchronous gRPC clients for the trainer, re-resolving addresses through etcd.

The master and the pservers can move (failover, restart): every call that
fails with UNAVAILABLE or a dead connection asks the `Resolver` for the
current address and retries until `deadline`, so the training loop never
sees a move.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from edl.runtime.proto import runtime_pb2_grpc as pb_grpc

log = logging.getLogger("edl.trainer")

MAX_MESSAGE = 256 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.enable_retries", 0),
]
RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
}


class Resolver(Protocol):
    """Where the job's members are now (backed by etcd discovery)."""

    def master_address(self) -> str | None: ...

    def pserver_addresses(self) -> dict[int, str]: ...


class Stopping(RuntimeError):
    """The trainer is shutting down; abandon the call."""


class Reconnecting:
    """A channel to one member, re-dialled when its address changes."""

    def __init__(self, lookup: Callable[[], str | None], stub_type: type, what: str) -> None:
        self._lookup = lookup
        self._stub_type = stub_type
        self._what = what
        self._lock = threading.Lock()
        self._address: str | None = None
        self._channel: grpc.Channel | None = None
        self._stub: object | None = None
        self.stopping = threading.Event()

    def _stub_for_now(self) -> object | None:
        address = self._lookup()
        with self._lock:
            if address != self._address:
                if self._channel is not None:
                    self._channel.close()
                self._address, self._channel, self._stub = address, None, None
                if address:
                    self._channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
                    self._stub = self._stub_type(self._channel)
            return self._stub

    def call(
        self, method: str, request: object, timeout: float = 10.0, deadline: float = 600.0
    ) -> Any:
        """Call `method`, retrying through moves until `deadline` seconds pass."""
        give_up = time.monotonic() + deadline
        delay = 0.05
        while True:
            if self.stopping.is_set():
                raise Stopping(self._what)
            stub = self._stub_for_now()
            if stub is not None:
                try:
                    return getattr(stub, method)(request, timeout=timeout)
                except grpc.RpcError as error:
                    if error.code() not in RETRYABLE:
                        raise
                    log.debug("%s %s: %s", self._what, method, error.code())
                    self._forget()
            if time.monotonic() > give_up:
                raise TimeoutError(f"{self._what} unreachable for {deadline:.0f} s")
            self.stopping.wait(delay)
            delay = min(delay * 2, 0.5)

    def _forget(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._address, self._channel, self._stub = None, None, None

    def close(self) -> None:
        self._forget()


def master_client(resolver: Resolver) -> Reconnecting:
    return Reconnecting(resolver.master_address, pb_grpc.MasterStub, "master")


def pserver_client(resolver: Resolver, index: int) -> Reconnecting:
    return Reconnecting(
        lambda: resolver.pserver_addresses().get(index), pb_grpc.PServerStub, f"pserver {index}"
    )
