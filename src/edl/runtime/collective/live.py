"""`edl agent` for a live collective job (``spec.collective.live: true``).

No torch elastic agent: the pod's workers are the script itself, ``nproc-per-node``
processes that use `edl.elastic`, which re-forms the world inside them when trainers
come and go. The agent only starts them with the live contract (the store's address,
an identity per worker, the world's bounds), echoes their output and publishes their
metric lines as the torchrun agent does, forwards SIGTERM (each worker then leaves at
its next step boundary), and restarts a worker that dies — telling the store first,
so the survivors re-form without waiting for it. Exit codes: 0 when the workers
finished, 143 when drained, else the last failure's code.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from edl.procs import die_with_parent
from edl.runtime.collective import gateway, keys
from edl.runtime.collective.failures import ScriptErrors
from edl.runtime.collective.launch import PYTHONS, AgentConfig
from edl.runtime.collective.supervise import CONFIG_EXIT, SIGTERM_EXIT, AgentError, _Metrics, _pump

POLL_S = 0.1
_FORMED = re.compile(r"edl-elastic \[.*\] formed gen=(\d+) world=(\d+)")


class _Generations:
    """Writes each generation a worker of this pod formed as rank 0 to the pod's agent
    record in etcd, as the torchrun agent writes its rounds: `edl run` and `edl status`
    show the world size and its changes the same way for both kinds of job."""

    def __init__(
        self, env: Mapping[str, str], config: AgentConfig, errors: ScriptErrors | None = None,
    ) -> None:
        self.endpoints = env.get("EDL_ETCD_ENDPOINTS") or ""
        pod = env.get("EDL_POD_NAME") or f"agent-{os.getpid()}"
        self.key = keys.agent_key(config.namespace, config.job, pod)
        self.nproc = config.nproc_per_node
        self.errors = errors

    def feed(self, line: str) -> None:
        if self.errors is not None:  # the workers' stderr: their tracebacks too
            self.errors.feed(line)
        found = _FORMED.search(line)
        if not found or not self.endpoints:
            return
        gen, world = int(found.group(1)), int(found.group(2))
        record = {"round": gen, "rank": 0, "nodes": max(1, world // self.nproc),
                  "world_size": world, "rendezvous": gen + 1, "time": time.time()}
        try:
            gateway.put(self.endpoints, self.key, json.dumps(record))
        except OSError as error:  # the display misses one generation; training goes on
            print(f"edl agent: generation not reported: {error}", file=sys.stderr, flush=True)


class _LiveFailures:
    """Each worker the agent restarts, recorded as the restart path records torch's
    restarts (`keys.failure_key`): `edl run` prints one line per failure, with the
    script's error or the signal, and counts a crash loop alike."""

    def __init__(self, env: Mapping[str, str], config: AgentConfig) -> None:
        self.endpoints = env.get("EDL_ETCD_ENDPOINTS") or ""
        self.key = keys.failure_key(config.namespace, config.job, env.get("EDL_POD_NAME") or "")
        self.errors = ScriptErrors()
        self.count = 0

    def record(self, ident: str, code: int, left: int, limit: int) -> None:
        record = self.payload(ident, code, left, limit)
        if not self.endpoints:
            return
        try:
            gateway.put(self.endpoints, self.key, json.dumps(record))
        except OSError as failure:
            print(f"edl agent: failure not published: {failure}", file=sys.stderr, flush=True)

    def payload(self, ident: str, code: int, left: int, limit: int) -> dict[str, Any]:
        """The failure record of worker ``ident`` that ended with ``code`` (counted)."""
        self.count += 1
        signalled = -code if code < 0 else (code - 128 if code > 128 else 0)
        try:
            killed = f"killed by {signal.Signals(signalled).name}" if signalled else ""
        except ValueError:
            killed = ""
        error = "" if killed else self.errors.script_error
        self.errors.progress()  # the next failure names its own error
        return {"error": error, "restarts_left": max(0, left), "max_restarts": limit,
                "failures": self.count, "live": True, "worker": ident,
                "how": killed or f"exited with status {code}"}


def live_prefix(config: AgentConfig) -> str:
    return f"edl-live/{config.namespace}/{config.job}"


def worker_command(config: AgentConfig, python: str) -> list[str]:
    """The entrypoint as argv, ``python`` replaced by this interpreter (unbuffered)."""
    try:
        command = shlex.split(config.entrypoint)
    except ValueError as error:
        raise AgentError(f"EDL_ENTRYPOINT: {error}", CONFIG_EXIT) from None
    if not command:
        raise AgentError("EDL_ENTRYPOINT: required", CONFIG_EXIT)
    if command[0] in PYTHONS:
        command = [python, "-u", *command[1:]]
    return command


def worker_env(
    env: Mapping[str, str], config: AgentConfig, endpoint: str, local_rank: int, incarnation: int
) -> dict[str, str]:
    pod = env.get("EDL_POD_NAME") or f"pod-{os.getpid()}"
    return {
        **env,
        "PYTHONUNBUFFERED": "1",
        "EDL_LIVE_STORE": endpoint,
        "EDL_LIVE_PREFIX": live_prefix(config),
        "EDL_LIVE_IDENT": f"{pod}/{local_rank}/{incarnation}",
        "EDL_LIVE_MIN_WORLD": str(config.min_nodes * config.nproc_per_node),
        "EDL_LIVE_MAX_WORLD": str(config.max_nodes * config.nproc_per_node),
        "LOCAL_RANK": str(local_rank),
        "EDL_LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(config.nproc_per_node),  # a trainer is this many workers
    }


class _Gone:
    """Tells the store a worker died. The store client (torch's) is made in the
    background as the agent starts, so a death is reported in milliseconds, not after
    an import of torch (seconds on a loaded machine) while the survivors wait."""

    def __init__(self, endpoint: str, prefix: str) -> None:
        self.endpoint, self.prefix = endpoint, prefix
        self.store: Any = None
        self._lock = threading.Lock()

    def connect(self) -> Any:
        with self._lock:
            if self.store is None:
                from datetime import timedelta

                from torch.distributed import TCPStore

                host, _, port = self.endpoint.rpartition(":")
                self.store = TCPStore(host, int(port), is_master=False,
                                      timeout=timedelta(seconds=10))
            return self.store

    def connect_soon(self) -> None:
        def quietly() -> None:
            with contextlib.suppress(Exception):  # reported when used, if it still fails
                self.connect()

        threading.Thread(target=quietly, daemon=True).start()

    def __call__(self, ident: str) -> None:
        try:
            self.connect().set(f"{self.prefix}/gone/{ident}", "1")
        except Exception as error:  # the survivors' arrival timeout still applies
            print(f"edl agent: could not report {ident} gone: {error}", file=sys.stderr, flush=True)


def run_live(env: Mapping[str, str], config: AgentConfig, endpoint: str, workspace: str) -> int:
    """Run this pod's live workers to the end; returns the exit status for `edl agent`."""
    command = worker_command(config, sys.executable)
    print(f"edl agent: live, {config.nproc_per_node} worker(s): {' '.join(command)}",
          file=sys.stderr, flush=True)
    failures = _LiveFailures(env, config)
    metrics = _Metrics(env, config, failures.errors)
    generations = _Generations(env, config, failures.errors)
    gone = _Gone(endpoint, live_prefix(config))
    drained = threading.Event()
    workers: dict[int, tuple[subprocess.Popen[bytes], str]] = {}
    incarnations = dict.fromkeys(range(config.nproc_per_node), 0)
    restarts, last_failure, exhausted = 0, 0, False

    def start(local_rank: int) -> None:
        child_env = worker_env(env, config, endpoint, local_rank, incarnations[local_rank])
        child = subprocess.Popen(
            command, cwd=workspace, env=child_env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, preexec_fn=die_with_parent,
        )
        assert child.stdout is not None and child.stderr is not None
        for source, sink, feed in ((child.stdout, sys.stdout, metrics.feed),
                                   (child.stderr, sys.stderr, generations.feed)):
            threading.Thread(target=_pump, args=(source, sink, feed), daemon=True).start()
        workers[local_rank] = (child, child_env["EDL_LIVE_IDENT"])

    def stop_all() -> None:
        for child, _ in list(workers.values()):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    def forward(signum: int, frame: object) -> None:
        drained.set()
        stop_all()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for local_rank in range(config.nproc_per_node):
        start(local_rank)
    gone.connect_soon()
    while workers:
        time.sleep(POLL_S)
        for local_rank, (child, ident) in list(workers.items()):
            code = child.poll()
            if code is None:
                continue
            del workers[local_rank]
            if code == 0 or drained.is_set() or exhausted:
                continue
            gone(ident)
            last_failure = code if code > 0 else 1
            if restarts >= config.max_restarts:
                print(f"edl agent: worker {ident} failed (status {code}); restarts exhausted "
                      f"({config.max_restarts})", file=sys.stderr, flush=True)
                exhausted = True
                stop_all()
                continue
            restarts += 1
            incarnations[local_rank] += 1
            print(f"edl agent: worker {ident} failed (status {code}); restarting it "
                  f"({restarts}/{config.max_restarts}), it joins the live world",
                  file=sys.stderr, flush=True)
            failures.record(ident, code, config.max_restarts - restarts, config.max_restarts)
            start(local_rank)
    if exhausted:
        return last_failure
    return SIGTERM_EXIT if drained.is_set() else 0
