"""Fixtures for the Kubernetes tests: kmock's emulator (see `kube.emulator` for what it
does and does not emulate), a lightkube client on it, and an in-process controller."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator, Callable
from typing import Any

import kmock
import pytest_asyncio
from lightkube import AsyncClient

from edl.kube.client import make_client
from kube.emulator import EdlEmulator, declare_resources


@pytest_asyncio.fixture
async def emulator() -> AsyncIterator[EdlEmulator]:
    async with EdlEmulator() as handler, kmock.Server(handler, host="127.0.0.1"):
        declare_resources(handler)
        yield handler


@pytest_asyncio.fixture
async def api(emulator: EdlEmulator) -> AsyncIterator[AsyncClient]:
    client = make_client(str(emulator.url), timeout=10)
    try:
        yield client
    finally:
        await client.close()


async def stopped_or_explained(task: asyncio.Task[None], timeout: float) -> None:
    """Await a stopping controller; if it does not stop within `timeout`, fail with the
    stack of every task still running (what it waits for), not a bare TimeoutError."""
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if task in done:
        task.result()
        return
    stacks = io.StringIO()
    for other in asyncio.all_tasks():
        if other is not asyncio.current_task():
            print(f"--- task {other.get_name()}:", file=stacks)
            other.print_stack(file=stacks)
    task.cancel()
    raise AssertionError(f"the controller did not stop within {timeout:g} s; its tasks:\n"
                         f"{stacks.getvalue()}")


@pytest_asyncio.fixture
async def running_controller(emulator: EdlEmulator) -> Callable[[], Any]:
    """`async with running_controller() as process:` an in-process `edl controller` against
    the emulator, with short intervals, started once it has synced and stopped afterwards."""
    from edl.kube.runner import ControllerOptions, ControllerProcess
    from polling import eventually

    @contextlib.asynccontextmanager
    async def run() -> AsyncIterator[ControllerProcess]:
        process = ControllerProcess(ControllerOptions(
            server=str(emulator.url), port=0, interval=0.5, status_interval=0.3,
            lease_duration=6, renew_deadline=4, retry_period=0.5, identity="test-controller",
        ))
        task = asyncio.create_task(process.run())
        await eventually(lambda: process.health.synced or task.done())
        assert not task.done(), task.exception()
        try:
            yield process
        finally:
            process.stop.set()
            await stopped_or_explained(task, 120)

    return run
