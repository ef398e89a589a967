"""Runtime configuration from the EDL_* environment (the container contract).

Processes are configured only through env vars (docs/architecture.md lists them); the
CLI flags of `edl master|pserver|trainer` override single fields for tests.
Parsing is pure: `from_env(mapping)` never reads os.environ itself.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any


class ConfigError(ValueError):
    """One or more EDL_* variables are missing or malformed; names each one."""


@dataclass(frozen=True)
class RuntimeConfig:
    job_name: str = "edl-job"
    namespace: str = "default"
    etcd_endpoints: str = ""
    pod_ip: str = "127.0.0.1"
    pod_name: str = ""
    port: int = 0  # 0: pick a free port and publish the real one in etcd
    pservers: int = 1
    passes: int = 1
    entrypoint: str = ""
    workspace: str = ""
    use_gpu: bool = False
    checkpoint_dir: str = ""
    checkpoint_interval: float = 60.0
    task_timeout_floor: float = 60.0
    trainer_ttl: float = 6.0
    lease_ttl: int = 5
    trainer_threads: int = 0  # torch threads for a trainer's compute; 0: one core fewer than here
    # spec.batch.initial of a job that adapts its batch (0: it does not): pservers sum
    # pushes into updates of the job's batch, trainers skip non-finite steps
    batch_initial: int = 0
    batch_flush: float = 5.0  # seconds an incomplete update waits before it is applied

    @property
    def member_name(self) -> str:
        return self.pod_name or f"{socket.gethostname()}-{os.getpid()}"

    @property
    def checkpoint_path(self) -> str:
        if self.checkpoint_dir:
            return self.checkpoint_dir
        base = self.workspace or os.path.join(os.getcwd())
        return os.path.join(base, ".edl-checkpoints", self.job_name)

    def with_overrides(self, **values: object) -> RuntimeConfig:
        changes: dict[str, Any] = {k: v for k, v in values.items() if v is not None}
        return replace(self, **changes)


ENV = {
    "job_name": "EDL_JOB_NAME",
    "namespace": "EDL_NAMESPACE",
    "etcd_endpoints": "EDL_ETCD_ENDPOINTS",
    "pod_ip": "EDL_POD_IP",
    "pod_name": "EDL_POD_NAME",
    "port": "EDL_PORT",
    "pservers": "EDL_PSERVERS",
    "passes": "EDL_PASSES",
    "entrypoint": "EDL_ENTRYPOINT",
    "workspace": "EDL_WORKSPACE",
    "use_gpu": "EDL_USE_GPU",
    "checkpoint_dir": "EDL_CHECKPOINT_DIR",
    "checkpoint_interval": "EDL_CHECKPOINT_INTERVAL",
    "task_timeout_floor": "EDL_TASK_TIMEOUT",
    "trainer_ttl": "EDL_TRAINER_TTL",
    "lease_ttl": "EDL_LEASE_TTL",
    "trainer_threads": "EDL_TRAINER_THREADS",
    "batch_initial": "EDL_BATCH_INITIAL",
    "batch_flush": "EDL_BATCH_FLUSH",
}


def from_env(env: Mapping[str, str] | None = None) -> RuntimeConfig:
    """Read every EDL_* variable; collect all problems before raising."""
    env = os.environ if env is None else env
    types = {f.name: f.type for f in fields(RuntimeConfig)}
    values: dict[str, object] = {}
    problems: list[str] = []
    for name, var in ENV.items():
        raw = env.get(var)
        if raw is None or raw == "":
            continue
        kind = types[name]
        try:
            if kind in ("int", int):
                values[name] = int(raw)
            elif kind in ("float", float):
                values[name] = float(raw)
            elif kind in ("bool", bool):
                if raw not in ("0", "1", "true", "false"):
                    raise ValueError
                values[name] = raw in ("1", "true")
            else:
                values[name] = raw
        except ValueError:
            problems.append(f"{var}: not a valid {kind}: {raw!r}")
    # values: each field converted to its declared kind above (int, float, bool or str)
    config = RuntimeConfig(**values)  # type: ignore[arg-type]
    problems.extend(validate(config))
    if problems:
        raise ConfigError("; ".join(problems))
    return config


def validate(config: RuntimeConfig) -> list[str]:
    problems = []
    if not 0 <= config.port <= 65535:
        problems.append(f"EDL_PORT: must be in 0..65535 (got {config.port})")
    if config.pservers < 1:
        problems.append(f"EDL_PSERVERS: must be >= 1 (got {config.pservers})")
    if config.passes < 1:
        problems.append(f"EDL_PASSES: must be >= 1 (got {config.passes})")
    if config.lease_ttl < 2:
        problems.append(f"EDL_LEASE_TTL: must be >= 2 seconds (got {config.lease_ttl})")
    if config.trainer_threads < 0:
        problems.append(f"EDL_TRAINER_THREADS: must be >= 0 (got {config.trainer_threads})")
    if config.batch_initial < 0:
        problems.append(f"EDL_BATCH_INITIAL: must be >= 0 (got {config.batch_initial})")
    if not config.batch_flush > 0:
        problems.append(f"EDL_BATCH_FLUSH: must be > 0 seconds (got {config.batch_flush})")
    return problems


def compute_threads(configured: int, cpus: int | None) -> int:
    """Torch threads for a trainer's forward/backward.

    0 (the default) leaves one core to the gradient push/parameter pull that
    runs in the background: measured on 2 cores, two compute threads waiting on
    each other while gRPC and the pserver want a core cost more than they gain.
    """
    if configured > 0:
        return configured
    return max(1, (cpus or 1) - 1)


def require(config: RuntimeConfig, *names: str) -> None:
    """Raise ConfigError naming each required field that is empty."""
    missing = [ENV[n] for n in names if not getattr(config, n)]
    if missing:
        raise ConfigError("; ".join(f"{var}: required" for var in missing))
