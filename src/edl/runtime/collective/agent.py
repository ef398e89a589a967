"""`edl agent`: one trainer pod of a collective job, supervising torch's elastic agent.

It finds the rendezvous store (``EDL_RDZV_ENDPOINT``, else the address the
master published in etcd), starts torchrun with the `edl` rendezvous in a child
process (`edl.runtime.collective.torchrun`), and while it runs: echoes its
output, publishes the script's ``name=value`` metric lines to etcd, forwards
SIGTERM; while its pod hosts rank 0 it probes ``EDL_CHECKPOINT_DIR`` (`ckpt_health`).
Exit codes follow `edl trainer`: 0 when the workers finished, 143 for a drained pod
(SIGTERM: a scale-down; the trainer Job ignores it), otherwise the agent's code with
the last error line printed.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping

from edl.procs import die_with_parent
from edl.runtime.collective import ckpt_health, gateway, keys
from edl.runtime.collective.failures import Restart, ScriptErrors, is_lost_peer
from edl.runtime.collective.launch import (
    AgentConfig,
    LaunchError,
    config_from_env,
    missing_program,
    torchrun_args,
)
from edl.runtime.collective.supervise import (
    CONFIG_EXIT,
    SIGTERM_EXIT,
    AgentError,
    _Metrics,
    _pump,
)

# Each rendezvous round's workers get a fresh store, hosted by their rank 0 on a new
# port, instead of sharing the rank-0 agent's store across rounds: there, keys are
# prefixed by each agent's own restart count, which drifts apart when one agent's
# workers fail and another's are restarted for a membership change, and workers then
# read the previous round's addresses (gloo: "connection refused", round after round).
WORKER_STORE_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
ENDPOINT_WAIT_S = 120.0
# torch restarts failed workers up to max-restarts (100) times per pod; the same script
# error this many times in a row with no metric line between is a crash loop: the agent
# ends torchrun and fails the pod with the line (on Kubernetes the trainer Job then
# counts it against its backoffLimit, instead of 100 restarts per pod)
CRASH_LOOP_FAILURES = 3


def find_endpoint(env: Mapping[str, str], config: AgentConfig, wait_s: float) -> str:
    """The store's host:port: the env's (the master Service), else the one in etcd."""
    given = (env.get("EDL_RDZV_ENDPOINT") or "").strip()
    if given:
        return given
    endpoints = env.get("EDL_ETCD_ENDPOINTS") or ""
    if not endpoints:
        raise AgentError("EDL_RDZV_ENDPOINT or EDL_ETCD_ENDPOINTS: one is required", CONFIG_EXIT)
    key = keys.rendezvous_key(config.namespace, config.job)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            address = gateway.get(endpoints, key)
        except OSError:
            address = None
        if address:
            return address
        if time.monotonic() > deadline:
            raise AgentError(
                f"no rendezvous store published at {key} within {wait_s:.0f} s "
                "(is the master pod running `edl rendezvous`?)",
                1,
            )
        time.sleep(0.5)


class _Failures:
    """Follows torchrun's stderr: the script's errors, and each restart torch counts.

    A restart is said on stderr and published to etcd (`keys.failure_key`), so a
    script that fails at once is seen failing, with its line, while torch retries it.
    """

    def __init__(
        self, env: Mapping[str, str], config: AgentConfig,
        on_crash_loop: Callable[[str], None] | None = None,
    ) -> None:
        self.endpoints = env.get("EDL_ETCD_ENDPOINTS") or ""
        self.key = keys.failure_key(config.namespace, config.job, env.get("EDL_POD_NAME") or "")
        self.errors = ScriptErrors()
        self.tail: collections.deque[str] = collections.deque(maxlen=20)
        self.on_crash_loop = on_crash_loop
        self.crash_loop = ""  # the error that ended torchrun as a crash loop
        self._streak: tuple[str, int] = ("", 0)  # (error, failures in a row)

    def feed(self, line: str) -> None:
        if line.strip():
            self.tail.append(line.rstrip())
        restart = self.errors.feed(line)
        if restart is not None:
            self._restarted(restart)

    def _restarted(self, restart: Restart) -> None:
        error = restart.error or "no error line"
        print(
            f"edl agent: the workers failed ({error}); torch restarts them "
            f"({restart.left} of {restart.limit} restarts left, spec.collective.max-restarts)",
            file=sys.stderr, flush=True,
        )
        self._count(restart)
        if not self.endpoints:
            return
        record = {"error": restart.error, "restarts_left": restart.left,
                  "max_restarts": restart.limit, "failures": self.errors.failures}
        try:
            gateway.put(self.endpoints, self.key, json.dumps(record))
        except OSError as failure:
            print(f"edl agent: failure not published: {failure}", file=sys.stderr, flush=True)


    def _count(self, restart: Restart) -> None:
        """The same script error again with no progress between: one more in the streak."""
        error = restart.error
        if not error or is_lost_peer(error):  # a kill, or a peer's failure: neither counts
            return
        last, count = self._streak
        count = count + 1 if error == last and not self.errors.progressed else 1
        self._streak = (error, count)
        self.errors.progressed = False
        if count >= CRASH_LOOP_FAILURES and not self.crash_loop:
            self.crash_loop = error
            print(f"edl agent: crash loop: the script failed {count} times in a row with the "
                  f"same error and no progress; stopping torchrun: {error}",
                  file=sys.stderr, flush=True)
            if self.on_crash_loop is not None:
                self.on_crash_loop(error)


def run_agent(env: Mapping[str, str], endpoint_wait_s: float = ENDPOINT_WAIT_S) -> int:
    """Run this pod's agent to the end; returns the exit status for `edl agent`."""
    try:  # configuration errors first, before waiting for the store
        config = config_from_env(env)
        torchrun_args(config, "", sys.executable)
    except LaunchError as error:
        raise AgentError(str(error), CONFIG_EXIT) from None
    workspace = env.get("EDL_WORKSPACE") or os.getcwd()
    if not os.path.isdir(workspace):
        raise AgentError(f"EDL_WORKSPACE: not a directory: {workspace}", CONFIG_EXIT)
    missing = missing_program(config.entrypoint, workspace)
    if missing:
        raise AgentError(missing, CONFIG_EXIT)
    checkpoints = env.get("EDL_CHECKPOINT_DIR") or ""
    if checkpoints:  # a promised directory exists, or the job fails at once saying why
        try:
            os.makedirs(os.path.join(workspace, checkpoints), exist_ok=True)
        except OSError as error:
            raise AgentError(f"EDL_CHECKPOINT_DIR: cannot create {checkpoints}: "
                             f"{error.strerror or error}", CONFIG_EXIT) from None
    endpoint = find_endpoint(env, config, endpoint_wait_s)
    rank0 = ckpt_health.watch(env, config.namespace, config.job, workspace)
    if env.get("EDL_LIVE") == "1":  # spec.collective.live: the script re-forms its own world
        from edl.runtime.collective.live import run_live

        code = run_live(env, config, endpoint, workspace)
    else:
        code = _run_torchrun(env, config, endpoint, workspace)
    if code != SIGTERM_EXIT:  # the workers ended, not drained: the checkpoint's last word
        rank0.finish()
    return code


def _run_torchrun(env: Mapping[str, str], config: AgentConfig, endpoint: str,
                  workspace: str) -> int:
    """torch's elastic agent over this pod's workers, to the end; the exit status."""
    args = torchrun_args(config, endpoint, sys.executable)
    child_env = {**env, "PYTHONUNBUFFERED": "1", **WORKER_STORE_ENV}
    argv = [sys.executable, "-m", "edl.runtime.collective.torchrun", *args]
    print(f"edl agent: torchrun {' '.join(args)}", file=sys.stderr, flush=True)
    child = subprocess.Popen(
        argv, cwd=workspace, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=die_with_parent,
    )
    drained = threading.Event()

    def stop(error: str) -> None:  # a crash loop: end torchrun as a drain would
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    failures = _Failures(env, config, stop)
    metrics = _Metrics(env, config, failures.errors)
    assert child.stdout is not None and child.stderr is not None
    pumps = [
        threading.Thread(target=_pump, args=(child.stdout, sys.stdout, metrics.feed), daemon=True),
        threading.Thread(target=_pump, args=(child.stderr, sys.stderr, failures.feed), daemon=True),
    ]
    for pump in pumps:
        pump.start()

    def forward(signum: int, frame: object) -> None:
        drained.set()
        if child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = child.wait()
    for pump in pumps:
        pump.join(timeout=2)
    if code == 0:
        return 0
    if drained.is_set():
        return SIGTERM_EXIT
    reason = failures.crash_loop or failures.errors.reason(_reason(list(failures.tail)))
    how = (f"{CRASH_LOOP_FAILURES} times in a row, a crash loop" if failures.crash_loop
           else f"status {code}")
    print(  # the pod's termination message: the trainer Job's (and TrainingJob's) reason
        f"edl agent: entrypoint {config.entrypoint!r} failed under torchrun ({how}): {reason}",
        file=sys.stderr,
        flush=True,
    )
    return code if code > 0 and not failures.crash_loop else 1


def _reason(lines: list[str]) -> str:
    """The most telling of the last error lines (torchrun ends with a banner of '=')."""
    for line in reversed(lines):
        text = line.strip()
        if text and not set(text) <= set("=-*") and "Traceback" not in text:
            return text
    return "no error output"
