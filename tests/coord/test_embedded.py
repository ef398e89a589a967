"""The embedded etcd is a real server, restarts in place and never outlives its owner."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from edl.coord.embedded import EmbeddedEtcd, EtcdStartError, find_etcd_binary


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); look at its state
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_dead(pid: int, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _health(endpoint: str) -> bytes:
    with urllib.request.urlopen(f"{endpoint}/health", timeout=5) as response:
        return response.read()


def test_find_binary_runs() -> None:
    binary = find_etcd_binary()
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("etcd Version: 3.")


def test_start_restart_stop_sync() -> None:
    server = EmbeddedEtcd()
    with server:
        assert server.endpoints.startswith("http://127.0.0.1:")
        assert b'"health":"true"' in _health(server.endpoints)
        first_pid, data_dir = server.pid, server.data_dir
        server.restart()
        assert server.pid != first_pid and server.data_dir == data_dir
        assert b'"health":"true"' in _health(server.endpoints)
        pid = server.pid
    assert pid is not None and _wait_dead(pid, 1.0)
    assert not data_dir.exists()
    server.stop()  # twice is harmless


async def test_async_context_manager_and_frozen_stop() -> None:
    async with EmbeddedEtcd() as server:
        pid = server.pid
        assert pid is not None
        server.kill(signal.SIGSTOP)  # stop() must still end a frozen server
    assert _wait_dead(pid, 1.0)


def test_port_in_use_is_a_clear_error() -> None:
    with EmbeddedEtcd() as first:
        clash = EmbeddedEtcd(client_port=first.client_port, startup_timeout=20)
        with pytest.raises(EtcdStartError, match="already in use"):
            clash.start()
        clash.stop()


_OWNER = """
import sys
from edl.coord.embedded import EmbeddedEtcd
server = EmbeddedEtcd().start()
print(server.pid, server.data_dir.parent, flush=True)
sys.stdin.readline()  # exit (normally) when the test says so
"""


@pytest.mark.parametrize("how", ["SIGKILL", "normal-exit"])
def test_no_etcd_outlives_its_owner(how: str) -> None:
    """An owner killed with SIGKILL (no atexit) or exiting normally leaves no etcd behind."""
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None and owner.stdin is not None
        pid_text, temp_dir = owner.stdout.readline().split()
        etcd_pid = int(pid_text)
        assert _alive(etcd_pid)
        if how == "SIGKILL":
            owner.kill()
        else:
            owner.stdin.write("exit\n")
            owner.stdin.flush()
        owner.wait(30)
        assert _wait_dead(etcd_pid), "etcd survived its owner"
    finally:
        owner.kill()
        owner.wait()
    # a SIGKILLed owner cannot remove its temporary data dir; the test does not leave it
    shutil.rmtree(temp_dir, ignore_errors=True)


def test_cli_check_and_foreground_server() -> None:
    check = subprocess.run(
        [sys.executable, "-m", "edl.coord.embedded", "--check"], capture_output=True, text=True
    )
    assert check.returncode == 0 and "etcd" in check.stdout
    proc = subprocess.Popen(
        [sys.executable, "-m", "edl.cli.main", "etcd"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        endpoint = lines[1].strip().removeprefix("EDL_ETCD_ENDPOINTS=")
        assert b'"health":"true"' in _health(endpoint)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        assert "etcd stopped" in proc.stdout.read()
    finally:
        proc.kill()
        proc.wait()


def test_cli_busy_port_is_one_readable_line(tmp_path: Path) -> None:
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    with EmbeddedEtcd() as first:
        result = subprocess.run(
            [sys.executable, "-m", "edl.cli.main", "etcd", "--client-port", str(first.client_port)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "TMPDIR": str(private_tmp)},  # mkdtemp's dir, watched below
        )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"edl etcd: etcd port(s) [{first.client_port}] on 127.0.0.1 already in use"
    ]
    assert list(private_tmp.iterdir()) == [], "a failed start must not leave its data dir"


async def test_picked_port_taken_meanwhile_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process may grab a picked port before etcd binds it: start picks again."""
    import socket

    from edl.coord import embedded

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        busy = squatter.getsockname()[1]
        real_free_port = embedded.free_port  # as imported there
        picks = iter([busy])
        monkeypatch.setattr(embedded, "free_port", lambda: next(picks, None) or real_free_port())
        async with EmbeddedEtcd() as server:
            assert server.client_port != busy
            assert b'"health":"true"' in _health(server.endpoints)


def test_binary_that_exits_at_once_is_a_one_line_error(tmp_path: Path) -> None:
    """Start errors are printed as is by `edl run`/`edl etcd`: one line, the log's last line."""
    script = tmp_path / "etcd"
    script.write_text(
        "#!/bin/sh\necho 'first line' >&2\necho 'flag provided but not defined' >&2\nexit 3\n"
    )
    script.chmod(0o755)
    server = EmbeddedEtcd(binary=script, startup_timeout=20)
    with pytest.raises(EtcdStartError) as caught:
        server.start()
    server.stop()
    message = str(caught.value)
    assert "\n" not in message
    assert "status 3" in message and "flag provided but not defined" in message
