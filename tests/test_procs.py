"""edl.procs: the one place for child-process and port helpers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from edl.procs import free_port, port_is_free


def test_a_listened_port_is_busy_and_a_free_one_is_free():
    port = free_port()
    assert port_is_free(port) and port_is_free(port, reuse_address=True)
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen(1)
        assert not port_is_free(port)
        assert not port_is_free(port, reuse_address=True)


def test_a_child_dies_with_the_process_that_spawned_it(tmp_path):
    # A middle process spawns a sleeper with die_with_parent, prints its pid, then is
    # SIGKILLed: the kernel must kill the sleeper too.
    script = (
        "import subprocess, sys, time\n"
        "from edl.procs import die_with_parent\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " preexec_fn=die_with_parent)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    middle = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert middle.stdout is not None
    child_pid = int(middle.stdout.readline())
    os.kill(middle.pid, signal.SIGKILL)
    middle.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            return
        if _is_zombie(child_pid):
            return
        time.sleep(0.05)
    os.kill(child_pid, signal.SIGKILL)
    raise AssertionError("the child outlived its parent")


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
