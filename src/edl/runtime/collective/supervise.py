"""What both kinds of `edl agent` share: exit codes, errors, echoing and metric lines."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable, Mapping
from typing import IO

from edl.runtime.collective import gateway, keys
from edl.runtime.collective.failures import ScriptErrors
from edl.runtime.collective.launch import AgentConfig
from edl.runtime.collective.metrics import parse_metrics

SIGTERM_EXIT = 128 + signal.SIGTERM
# a configuration error (EX_CONFIG, as `edl trainer`): the trainer Job's podFailurePolicy
# fails the Job at once and `edl run` ends the run, since a restart would fail alike
CONFIG_EXIT = 78


class AgentError(RuntimeError):
    """The agent cannot start; `code` is the exit status to use."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class _Metrics:
    """Publishes metric lines to etcd (merged: the last value of each name wins)."""

    def __init__(
        self, env: Mapping[str, str], config: AgentConfig, errors: ScriptErrors | None = None
    ) -> None:
        self.endpoints = env.get("EDL_ETCD_ENDPOINTS") or ""
        self.key = keys.metrics_key(config.namespace, config.job)
        self.values: dict[str, float] = {}
        self.errors = errors

    def feed(self, line: str) -> None:
        found = parse_metrics(line)
        if not found:
            return
        if self.errors is not None:
            self.errors.progress()
        self.values.update(found)
        if self.endpoints:
            try:
                gateway.put(self.endpoints, self.key, json.dumps(self.values))
            except OSError as error:
                print(f"edl agent: metrics not published: {error}", file=sys.stderr, flush=True)


def _pump(source: IO[bytes], sink: IO[str], on_line: Callable[[str], None]) -> None:
    for raw in source:
        line = raw.decode(errors="replace")
        sink.write(line)
        sink.flush()
        on_line(line)


