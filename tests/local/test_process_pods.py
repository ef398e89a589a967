"""The process pod runner with tiny Python scripts as pods (real processes)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from edl.local import procs
from edl.local.podspec import default_context
from edl.local.process_pods import RUN_MARKER_ENV, ProcessPodRunner


def pod(name: str, code: str, env: list[dict] | None = None, role: str = "trainer") -> dict:
    return {
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"edl.dev/job": "j", "edl.dev/role": role}},
        "spec": {"containers": [
            {"name": "main", "command": ["python", "-c", code], "env": env or []}]},
    }


class Events:
    """Collects the pod runner's callbacks per pod."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.exits: dict[str, int] = {}

    def start(self, pod_runner: ProcessPodRunner, manifest: dict) -> None:
        name = manifest["metadata"]["name"]

        def on_exit(code: int) -> None:
            assert name not in self.exits, "on_exit must be called exactly once"
            self.exits[name] = code

        pod_runner.start(manifest, lambda: self.running.add(name), on_exit)

    async def wait_exit(self, name: str, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while name not in self.exits:
            assert time.monotonic() < deadline, f"{name} did not exit"
            await asyncio.sleep(0.05)
        return self.exits[name]


@pytest.fixture
def pod_runner(tmp_path: Path) -> ProcessPodRunner:
    ctx = default_context("http://127.0.0.1:1", "local", os.environ)
    return ProcessPodRunner(tmp_path / "run", ctx, cwd=tmp_path)


async def test_exit_codes_become_phases_and_logs_are_files(pod_runner: ProcessPodRunner) -> None:
    events = Events()
    hello = "import os; print('hello from', os.environ['EDL_POD_NAME'])"
    events.start(pod_runner, pod("ok", hello))
    events.start(pod_runner, pod("bad", "raise SystemExit('script exploded: bad data')"))
    assert await events.wait_exit("ok") == 0
    assert await events.wait_exit("bad") == 1
    assert events.running >= {"ok", "bad"}
    assert "hello from ok" in (pod_runner.run_dir / "ok.log").read_text()
    assert pod_runner.termination_message("ok") == ""
    assert "script exploded: bad data" in pod_runner.termination_message("bad")


async def test_pods_get_distinct_free_ports_and_local_env(pod_runner: ProcessPodRunner) -> None:
    events = Events()
    code = (
        "import os, socket\n"
        "s = socket.socket(); s.bind(('127.0.0.1', int(os.environ['EDL_PORT'])))\n"
        "print('PORT', os.environ['EDL_PORT'], os.environ['EDL_POD_IP'],"
        " os.environ['EDL_ETCD_ENDPOINTS'])\n"
        "import time; time.sleep(0.5)\n"
    )
    env = [{"name": "EDL_PORTS_NUM", "value": "2"}]
    names = [f"ps-{i}" for i in range(4)]
    for name in names:
        events.start(pod_runner, pod(name, code, env))
    ports = []
    for name in names:
        assert await events.wait_exit(name) == 0, (pod_runner.run_dir / f"{name}.log").read_text()
        line = next(x for x in (pod_runner.run_dir / f"{name}.log").read_text().splitlines()
                    if x.startswith("PORT"))
        _, port, ip, etcd = line.split()
        assert ip == "127.0.0.1" and etcd == "http://127.0.0.1:1"
        ports.append(int(port))
    blocks = [set(range(p, p + 2)) for p in ports]
    assert all(a.isdisjoint(b) for i, a in enumerate(blocks) for b in blocks[i + 1:])


async def test_stop_sends_sigterm_first(pod_runner: ProcessPodRunner) -> None:
    events = Events()
    code = (
        "import signal, sys, time\n"
        "def bye(*_):\n"
        "    print('got SIGTERM', flush=True)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    events.start(pod_runner, pod("polite", code))
    await wait_for_log(pod_runner.run_dir / "polite.log", "ready")
    pod_runner.stop({"metadata": {"name": "polite"}}, grace_period_s=10)
    assert await events.wait_exit("polite") == 0, (pod_runner.run_dir / "polite.log").read_text()
    assert "got SIGTERM" in (pod_runner.run_dir / "polite.log").read_text()


async def test_stop_kills_after_grace_with_children(pod_runner: ProcessPodRunner) -> None:
    events = Events()
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import signal, time;"
        " signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    events.start(pod_runner, pod("stubborn", code))
    await wait_for_log(pod_runner.run_dir / "stubborn.log", "child")
    started = time.monotonic()
    pod_runner.stop({"metadata": {"name": "stubborn"}}, grace_period_s=1.0)
    assert await events.wait_exit("stubborn") == 128 + 9
    assert time.monotonic() - started >= 0.9, "SIGKILL must wait for the grace period"
    await wait_until(lambda: not procs.pids_with_env(RUN_MARKER_ENV, str(pod_runner.run_dir)))


async def test_stop_before_running_still_exits_once(pod_runner: ProcessPodRunner) -> None:
    events = Events()
    manifest = pod("early", "import time; time.sleep(60)")
    events.start(pod_runner, manifest)
    pod_runner.stop(manifest, grace_period_s=0)  # before the supervisor task ever ran
    assert await events.wait_exit("early") != 0
    await asyncio.sleep(0.3)  # a second on_exit would trip the assertion in Events


async def test_missing_executable_fails_the_pod(pod_runner: ProcessPodRunner) -> None:
    events = Events()
    manifest = pod("ghost", "")
    manifest["spec"]["containers"][0]["command"] = ["/nonexistent/program"]
    events.start(pod_runner, manifest)
    assert await events.wait_exit("ghost") != 0
    assert "nonexistent" in pod_runner.termination_message("ghost")


async def test_shutdown_leaves_no_process(pod_runner: ProcessPodRunner) -> None:
    events = Events()
    for i in range(3):
        code = "import time; print('up', flush=True); time.sleep(60)"
        events.start(pod_runner, pod(f"sleeper-{i}", code))
    for i in range(3):
        await wait_for_log(pod_runner.run_dir / f"sleeper-{i}.log", "up")
    assert len(procs.pids_with_env(RUN_MARKER_ENV, str(pod_runner.run_dir))) == 3
    await pod_runner.shutdown(grace_period_s=2)
    assert procs.pids_with_env(RUN_MARKER_ENV, str(pod_runner.run_dir)) == []
    assert set(events.exits) == {f"sleeper-{i}" for i in range(3)}


def test_pod_dies_with_its_parent(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: a pod leader is SIGKILLed when the process that spawned it dies."""
    marker = str(tmp_path)
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from edl.local import procs\n"
        f"procs.spawn([sys.executable, '-c', 'import time; time.sleep(60)'],"
        f" {{'EDL_LOCAL_RUN': {marker!r}}}, '.', Path({marker!r}) / 'x.log')\n"
        "print('spawned', flush=True)\n"
        "time.sleep(60)\n"
    )
    import subprocess

    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None and parent.stdout.readline().strip() == "spawned"
    assert procs.pids_with_env(RUN_MARKER_ENV, marker)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while procs.pids_with_env(RUN_MARKER_ENV, marker):
        assert time.monotonic() < deadline, "pod outlived its parent"
        time.sleep(0.05)


async def wait_for_log(path: Path, text: str, timeout: float = 30.0) -> None:
    """Wait for a line the pod printed (the pod runner's own header line names the command)."""

    def printed() -> bool:
        if not path.exists():
            return False
        lines = path.read_text().splitlines()
        return any(text in line for line in lines if not line.startswith("# edl local:"))

    await wait_until(printed, timeout)


async def wait_until(predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def test_port_blocks_are_free_distinct_and_reusable_after_release() -> None:
    import socket

    from edl.local.ports import PortAllocator

    with socket.socket() as busy:
        # No fixed ports (other runs share the machine): the kernel picks the busy one,
        # and the allocator's range starts right before it, so its first block overlaps.
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        held = busy.getsockname()[1]
        first = held - 1 if held + 40 < 65535 else held - 40
        allocator = PortAllocator(first=first, last=first + 41, start=first)
        a = allocator.allocate(2)
        b = allocator.allocate(2)
    assert held not in range(a, a + 2) and held not in range(b, b + 2)
    assert first <= a < first + 41 and first <= b < first + 41
    assert set(range(a, a + 2)).isdisjoint(range(b, b + 2))
    allocator.release(a, 2)
    taken = {allocator.allocate(1) for _ in range(6)}
    assert len(taken) == 6 and taken.isdisjoint(range(b, b + 2))
