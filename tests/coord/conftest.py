"""Fixtures: a real etcd server per test, and real role processes (roles.py)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from edl.coord.embedded import EmbeddedEtcd

ROLES = str(Path(__file__).with_name("roles.py"))


class RoleProcess:
    """A child running roles.py; its stdout lines are collected by a thread."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, ROLES, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[tuple[str, float, str]] = []
        self._queue: queue.Queue[tuple[str, float, str]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            word, stamp, *rest = line.rstrip("\n").split(" ", 2)
            self._queue.put((word, float(stamp), rest[0] if rest else ""))

    def _drain(self) -> None:
        while True:
            try:
                self.lines.append(self._queue.get_nowait())
            except queue.Empty:
                return

    def wait_for(self, word: str, within: float = 30.0, after: float = 0.0) -> tuple[float, str]:
        """Block until a line ``word`` stamped after ``after`` arrives; (stamp, detail)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            self._drain()
            for got, stamp, detail in self.lines:
                if got == word and stamp > after:
                    return stamp, detail
            if self.proc.poll() is not None and self._queue.empty():
                time.sleep(0.1)  # let the reader thread pass on the last lines
                self._drain()
                if not any(got == word and stamp > after for got, stamp, _ in self.lines):
                    break
            time.sleep(0.02)
        raise AssertionError(f"no {word!r} line within {within} s; got {self.lines[-10:]}")

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def freeze(self, within: float = 10.0) -> float:
        """SIGSTOP and wait until the kernel shows it stopped; returns that moment.

        kill() only queues the signal: a child running on the other core may
        still execute (and print) briefly, so the test waits for state T.
        """
        os.kill(self.proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with open(f"/proc/{self.proc.pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                    return time.monotonic()
            time.sleep(0.005)
        raise AssertionError("process did not stop")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
async def etcd() -> AsyncIterator[EmbeddedEtcd]:
    async with EmbeddedEtcd() as server:
        yield server


@pytest.fixture
def spawn() -> Iterator[Callable[..., RoleProcess]]:
    """Start roles.py processes; every one is killed at the end of the test."""
    started: list[RoleProcess] = []

    def start(*args: str) -> RoleProcess:
        started.append(RoleProcess(*args))
        return started[-1]

    yield start
    for process in started:
        process.stop()
