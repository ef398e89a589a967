"""`edl trainer`: run the job's entrypoint script in its workspace.

The script uses `edl.runtime.trainer.connect(...)`, which reads the same
EDL_* environment. The script runs as a child (same process group, so a pod
SIGTERM reaches it directly); when it fails, its last error line is printed
as one readable line and the exit status is passed on.
"""

from __future__ import annotations

import collections
import os
import shlex
import signal
import subprocess
import sys
import threading

import click

from edl.cli._runtime_common import EXIT_CONFIG, common_options, fail, load_config
from edl.procs import die_with_parent
from edl.runtime.collective.launch import missing_program


def entry_argv(entrypoint: str) -> list[str]:
    """Split the entrypoint; a leading `python` means this interpreter."""
    argv = shlex.split(entrypoint)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return argv


@click.command("trainer")
@common_options
@click.option("--entrypoint", help="command to run (EDL_ENTRYPOINT)")
@click.option("--workspace", help="directory to run it in (EDL_WORKSPACE)")
@click.option("--pservers", type=int, help="pserver count (EDL_PSERVERS)")
def trainer(**overrides: object) -> None:
    """Run the trainer entrypoint with the job's environment."""
    config = load_config("trainer", **overrides)
    if not config.entrypoint:
        fail("edl trainer: EDL_ENTRYPOINT: required (the TrainingJob's spec.trainer.entrypoint)",
             EXIT_CONFIG)
    workspace = config.workspace or os.getcwd()
    if not os.path.isdir(workspace):
        fail(f"edl trainer: EDL_WORKSPACE: not a directory: {workspace}", EXIT_CONFIG)
    try:
        argv = entry_argv(config.entrypoint)
    except ValueError as error:
        fail(f"edl trainer: EDL_ENTRYPOINT: {error}", EXIT_CONFIG)
    missing = missing_program(config.entrypoint, workspace)
    if missing:  # every replacement would fail alike: a configuration error, at once
        fail(f"edl trainer: {missing}", EXIT_CONFIG)
    env = dict(os.environ)
    for key, value in {
        "EDL_ETCD_ENDPOINTS": config.etcd_endpoints, "EDL_JOB_NAME": config.job_name,
        "EDL_PSERVERS": str(config.pservers), "EDL_POD_IP": config.pod_ip,
        "EDL_WORKSPACE": os.path.abspath(workspace),
    }.items():  # fmt: skip
        env[key] = value
    env["PYTHONUNBUFFERED"] = "1"
    try:
        child = subprocess.Popen(
            argv, cwd=workspace, env=env, stderr=subprocess.PIPE, preexec_fn=die_with_parent
        )
    except OSError as error:
        fail(f"edl trainer: cannot start {config.entrypoint!r}: {error}", 127)
    tail: collections.deque[str] = collections.deque(maxlen=20)

    def pump() -> None:
        assert child.stderr is not None
        for raw in child.stderr:
            line = raw.decode(errors="replace")
            sys.stderr.write(line)
            sys.stderr.flush()
            if line.strip():
                tail.append(line.rstrip())

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()

    def forward(signum: int, frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = child.wait()
    reader.join(timeout=2)
    if code == 0:
        return
    if code == 128 + signal.SIGTERM or code == -signal.SIGTERM:
        sys.exit(128 + signal.SIGTERM)
    reason = tail[-1] if tail else "no error output"
    fail(f"edl trainer: entrypoint {config.entrypoint!r} exited with status {code}: {reason}",
         code if code > 0 else 1)
